//! A compact, exact encoding of string-keyed JSON maps: the session data of
//! web frameworks that keep it as `HashMap<String, serde_json::Value>`
//! (tower-sessions, and through it axum-login), and actix-session's maps of
//! JSON texts, parsed ([`crate::actix`]).
//!
//! It is MessagePack with three changes, each lossless:
//!
//! - **Keys as small codes.** A key in [`KNOWN_KEYS`] (the ones frameworks
//!   write into every session, such as `axum-login.data`, `user_id`,
//!   `auth_hash`) is written as its index, one byte; any other key is
//!   written as a string the first time it appears in a record and as a
//!   code after that (codes `KNOWN_KEYS.len()..` in order of first
//!   appearance), so an array of objects repeats no key. JSON keys are
//!   always strings, so an integer in a key's place is always a code.
//! - **Byte arrays as binary.** An array of integers `0..=255` (what serde
//!   makes of a `Vec<u8>`, such as axum-login's `auth_hash`) is written as
//!   MessagePack binary when that is shorter (one byte per element, where
//!   the array form takes two for every element above 127) and read back
//!   as the same array. JSON has no binary type, so nothing else reads
//!   back as one.
//! - **Floats in four bytes when exact.** A number that a 32-bit float
//!   holds exactly is written as one.
//!
//! Integers keep their sign class (`u64` / `i64`), floats stay floats, and
//! objects keep the order their map has (insertion order where the app's
//! serde_json has `preserve_order`, which this crate does not turn on);
//! the top-level map is written in key order so
//! that equal maps encode to equal bytes. [`KNOWN_KEYS`] only ever grows:
//! a code, once given, keeps its key.
//!
//! Expiry is not part of the encoding: the store keeps it beside the
//! record, as for every session.

use std::collections::HashMap;
use std::sync::LazyLock;

use rmp::Marker;
use serde_json::{Map, Number, Value};

/// Keys written as one-byte codes, by index. Append only.
pub const KNOWN_KEYS: &[&str] = &[
    // axum-login (`axum_login::session`), tower-sessions
    "axum-login.data",
    "user_id",
    "auth_hash",
    // common in web sessions of every framework
    "csrf_token",
    "flash",
    "messages",
    "user",
    "id",
    "name",
    "email",
    "role",
    "roles",
    "locale",
    "theme",
    "return_to",
    "created_at",
    "last_seen",
    "expires_at",
    "cart",
    "oauth_state",
    "pkce_verifier",
    "nonce",
    // Django (`django.contrib.auth`)
    "_auth_user_id",
    "_auth_user_backend",
    "_auth_user_hash",
    "_session_expiry",
    "_language",
    // Flask-Login, Rails, Express (passport)
    "_user_id",
    "_fresh",
    "_id",
    "_csrf_token",
    "session_id",
    "warden.user.user.key",
    "passport",
    // actix-identity (through actix-session)
    "actix_identity.user_id",
    "actix_identity.last_visited_at",
    "actix_identity.logged_in_at",
];

/// Deepest nesting of arrays and objects accepted, as serde_json's parser.
pub const MAX_DEPTH: usize = 128;

static KNOWN: LazyLock<HashMap<&'static str, u64>> = LazyLock::new(|| {
    KNOWN_KEYS
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, i as u64))
        .collect()
});

/// Why a map could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(String);

impl CodecError {
    /// An error saying `why`.
    #[cfg_attr(not(feature = "actix-session"), allow(dead_code))]
    pub(crate) fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

/// Encodes a map; equal maps give equal bytes.
pub fn encode(map: &HashMap<String, Value>) -> Result<Vec<u8>, CodecError> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut enc = Encoder::default();
    enc.map_len(entries.len());
    for (key, value) in entries {
        enc.key(key);
        enc.value(value, 1)?;
    }
    Ok(enc.out)
}

/// Decodes what [`encode`] wrote; the error says what was wrong.
pub fn decode(bytes: &[u8]) -> Result<HashMap<String, Value>, CodecError> {
    let mut dec = Decoder {
        rest: bytes,
        keys: Vec::new(),
    };
    let len = match dec.marker()? {
        Marker::FixMap(n) => u32::from(n),
        Marker::Map16 => u32::from(dec.u16()?),
        Marker::Map32 => dec.u32()?,
        m => return Err(CodecError(format!("a record is a map, found {m:?}"))),
    };
    let mut map = HashMap::with_capacity((len as usize).min(bytes.len()));
    for _ in 0..len {
        let key = dec.key()?;
        let value = dec.value(1)?;
        map.insert(key, value);
    }
    if !dec.rest.is_empty() {
        return Err(CodecError(format!("{} trailing bytes", dec.rest.len())));
    }
    Ok(map)
}

#[derive(Default)]
struct Encoder<'a> {
    out: Vec<u8>,
    /// Keys given dynamic codes so far, in order.
    seen: HashMap<&'a str, u64>,
}

impl<'a> Encoder<'a> {
    // Writes to a Vec cannot fail: the results below are discarded.
    fn map_len(&mut self, len: usize) {
        let _ = rmp::encode::write_map_len(&mut self.out, len as u32);
    }

    fn key(&mut self, key: &'a str) {
        if let Some(&code) = KNOWN.get(key).or_else(|| self.seen.get(key)) {
            let _ = rmp::encode::write_uint(&mut self.out, code);
            return;
        }
        let code = (KNOWN_KEYS.len() + self.seen.len()) as u64;
        self.seen.insert(key, code);
        let _ = rmp::encode::write_str(&mut self.out, key);
    }

    fn value(&mut self, value: &'a Value, depth: usize) -> Result<(), CodecError> {
        if depth > MAX_DEPTH {
            return Err(CodecError(format!("nested deeper than {MAX_DEPTH}")));
        }
        let out = &mut self.out;
        match value {
            Value::Null => {
                let _ = rmp::encode::write_nil(out);
            }
            Value::Bool(b) => {
                let _ = rmp::encode::write_bool(out, *b);
            }
            Value::Number(n) => number(out, n),
            Value::String(s) => {
                let _ = rmp::encode::write_str(out, s);
            }
            Value::Array(items) => {
                if let Some(bytes) = as_bytes(items) {
                    let _ = rmp::encode::write_bin(out, &bytes);
                    return Ok(());
                }
                let _ = rmp::encode::write_array_len(out, items.len() as u32);
                for item in items {
                    self.value(item, depth + 1)?;
                }
            }
            Value::Object(map) => {
                self.map_len(map.len());
                for (key, value) in map {
                    self.key(key);
                    self.value(value, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

fn number(out: &mut Vec<u8>, n: &Number) {
    if let Some(u) = n.as_u64() {
        let _ = rmp::encode::write_uint(out, u);
    } else if let Some(i) = n.as_i64() {
        let _ = rmp::encode::write_sint(out, i);
    } else if let Some(f) = n.as_f64() {
        let narrow = f as f32;
        if f64::from(narrow) == f {
            let _ = rmp::encode::write_f32(out, narrow);
        } else {
            let _ = rmp::encode::write_f64(out, f);
        }
    }
}

/// The array as bytes, when every element is an integer `0..=255` and the
/// binary form is strictly shorter than the array form.
fn as_bytes(items: &[Value]) -> Option<Vec<u8>> {
    let bytes: Vec<u8> = items
        .iter()
        .map(|v| v.as_u64().and_then(|u| u8::try_from(u).ok()))
        .collect::<Option<_>>()?;
    let header = |len: usize, small: usize| if len <= small { 1 } else { 3 };
    let array = header(bytes.len(), 15)
        + bytes
            .iter()
            .map(|&b| 1 + usize::from(b > 127))
            .sum::<usize>();
    let binary = if bytes.len() <= 255 { 2 } else { 3 } + bytes.len();
    (binary < array).then_some(bytes)
}

struct Decoder<'a> {
    rest: &'a [u8],
    keys: Vec<String>,
}

impl Decoder<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CodecError> {
        if self.rest.len() < n {
            return Err(CodecError("truncated".into()));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn marker(&mut self) -> Result<Marker, CodecError> {
        Ok(Marker::from_u8(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }

    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }

    fn str(&mut self, len: usize) -> Result<String, CodecError> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| CodecError("a string is not UTF-8".into()))
    }

    fn key(&mut self) -> Result<String, CodecError> {
        let code = match self.marker()? {
            Marker::FixPos(n) => u64::from(n),
            Marker::U8 => u64::from(self.take(1)?[0]),
            Marker::U16 => u64::from(self.u16()?),
            Marker::U32 => u64::from(self.u32()?),
            Marker::U64 => self.u64()?,
            Marker::FixStr(n) => return self.new_key(usize::from(n)),
            Marker::Str8 => {
                let n = self.take(1)?[0];
                return self.new_key(usize::from(n));
            }
            Marker::Str16 => {
                let n = self.u16()?;
                return self.new_key(usize::from(n));
            }
            Marker::Str32 => {
                let n = self.u32()?;
                return self.new_key(n as usize);
            }
            m => {
                return Err(CodecError(format!(
                    "a key is a code or a string, found {m:?}"
                )));
            }
        };
        let code = usize::try_from(code).unwrap_or(usize::MAX);
        KNOWN_KEYS
            .get(code)
            .map(|k| (*k).to_owned())
            .or_else(|| self.keys.get(code - KNOWN_KEYS.len()).cloned())
            .ok_or_else(|| CodecError(format!("key code {code} was never given")))
    }

    fn new_key(&mut self, len: usize) -> Result<String, CodecError> {
        let key = self.str(len)?;
        self.keys.push(key.clone());
        Ok(key)
    }

    fn value(&mut self, depth: usize) -> Result<Value, CodecError> {
        if depth > MAX_DEPTH {
            return Err(CodecError(format!("nested deeper than {MAX_DEPTH}")));
        }
        Ok(match self.marker()? {
            Marker::Null => Value::Null,
            Marker::True => Value::Bool(true),
            Marker::False => Value::Bool(false),
            Marker::FixPos(n) => n.into(),
            Marker::FixNeg(n) => n.into(),
            Marker::U8 => self.take(1)?[0].into(),
            Marker::U16 => self.u16()?.into(),
            Marker::U32 => self.u32()?.into(),
            Marker::U64 => self.u64()?.into(),
            Marker::I8 => (self.take(1)?[0] as i8).into(),
            Marker::I16 => (self.u16()? as i16).into(),
            Marker::I32 => (self.u32()? as i32).into(),
            Marker::I64 => (self.u64()? as i64).into(),
            Marker::F32 => float(f64::from(f32::from_bits(self.u32()?)))?,
            Marker::F64 => float(f64::from_bits(self.u64()?))?,
            Marker::FixStr(n) => Value::String(self.str(usize::from(n))?),
            Marker::Str8 => {
                let n = self.take(1)?[0];
                Value::String(self.str(usize::from(n))?)
            }
            Marker::Str16 => {
                let n = self.u16()?;
                Value::String(self.str(usize::from(n))?)
            }
            Marker::Str32 => {
                let n = self.u32()?;
                Value::String(self.str(n as usize)?)
            }
            Marker::Bin8 => {
                let n = self.take(1)?[0];
                self.bytes(usize::from(n))?
            }
            Marker::Bin16 => {
                let n = self.u16()?;
                self.bytes(usize::from(n))?
            }
            Marker::Bin32 => {
                let n = self.u32()?;
                self.bytes(n as usize)?
            }
            Marker::FixArray(n) => self.array(usize::from(n), depth)?,
            Marker::Array16 => {
                let n = self.u16()?;
                self.array(usize::from(n), depth)?
            }
            Marker::Array32 => {
                let n = self.u32()?;
                self.array(n as usize, depth)?
            }
            Marker::FixMap(n) => self.object(usize::from(n), depth)?,
            Marker::Map16 => {
                let n = self.u16()?;
                self.object(usize::from(n), depth)?
            }
            Marker::Map32 => {
                let n = self.u32()?;
                self.object(n as usize, depth)?
            }
            m => return Err(CodecError(format!("unexpected {m:?}"))),
        })
    }

    fn bytes(&mut self, len: usize) -> Result<Value, CodecError> {
        Ok(Value::Array(
            self.take(len)?.iter().map(|&b| Value::from(b)).collect(),
        ))
    }

    fn array(&mut self, len: usize, depth: usize) -> Result<Value, CodecError> {
        // Every element takes at least a byte: a hostile length cannot
        // reserve more than the input could fill.
        let mut items = Vec::with_capacity(len.min(self.rest.len()));
        for _ in 0..len {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn object(&mut self, len: usize, depth: usize) -> Result<Value, CodecError> {
        let mut map = Map::with_capacity(len.min(self.rest.len()));
        for _ in 0..len {
            let key = self.key()?;
            let value = self.value(depth + 1)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

fn float(f: f64) -> Result<Value, CodecError> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| CodecError("a float that JSON cannot hold".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> HashMap<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    fn round_trip(v: Value) -> usize {
        let m = map(v);
        let bytes = encode(&m).unwrap();
        let back = decode(&bytes).unwrap();
        assert_eq!(back, m);
        // Exact, down to number classes and nested order.
        assert_eq!(
            serde_json::to_string(&Value::from_iter(sorted(&back))).unwrap(),
            serde_json::to_string(&Value::from_iter(sorted(&m))).unwrap()
        );
        bytes.len()
    }

    fn sorted(m: &HashMap<String, Value>) -> Vec<(String, Value)> {
        let mut v: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn the_axum_login_shape_takes_40_bytes_with_a_32_byte_digest() {
        let digest: Vec<u8> = (0..32).map(|i| 200 - i).collect();
        let n = round_trip(json!({"axum-login.data": {"user_id": 42, "auth_hash": digest}}));
        // map, code, map, code, 42, code, bin8 header, 32 bytes
        assert_eq!(n, 1 + 1 + 1 + 1 + 1 + 1 + 2 + 32);
    }

    #[test]
    fn numbers_keep_their_class_and_value() {
        round_trip(json!({
            "a": 0, "b": u64::MAX, "c": -1, "d": i64::MIN, "e": 1.5, "f": 0.1,
            "g": -0.0, "h": 1e300, "i": 255, "j": -129
        }));
        let m = decode(&encode(&map(json!({"f": 1.0}))).unwrap()).unwrap();
        assert!(m["f"].is_f64());
        let m = decode(&encode(&map(json!({"u": 7}))).unwrap()).unwrap();
        assert!(m["u"].is_u64());
    }

    #[test]
    fn repeated_keys_are_written_once() {
        let one = round_trip(json!({"items": [{"sku": "a", "qty": 1}]}));
        let two = round_trip(json!({"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}));
        // The second object: map header, two one-byte codes, two values.
        assert_eq!(two - one, 1 + (1 + 2) + (1 + 1));
    }

    #[test]
    fn byte_arrays_read_back_as_arrays() {
        round_trip(json!({"a": [], "b": [1], "c": [255, 0, 128], "d": [256, 1], "e": [1.0, 2]}));
        round_trip(json!({"k": (0..=255).collect::<Vec<u32>>()}));
        round_trip(json!({"k": (0..70000).map(|i| i % 256).collect::<Vec<u32>>()}));
    }

    #[test]
    fn strings_objects_and_order_survive() {
        round_trip(json!({
            "": "", "ünï": "çødé", "nested": {"z": 1, "a": {"y": [null, true, false]}},
            "user_id": "not a number", "long": "x".repeat(70000)
        }));
        // A nested object comes back in the order its map kept: insertion
        // order where the app's serde_json has `preserve_order`, sorted
        // where it has not (this crate turns neither on).
        let m = map(json!({"o": {"z": 1, "a": 2, "m": 3}}));
        let kept: Vec<_> = m["o"].as_object().unwrap().keys().cloned().collect();
        let back = decode(&encode(&m).unwrap()).unwrap();
        let keys: Vec<_> = back["o"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, kept);
    }

    #[test]
    fn equal_maps_encode_to_equal_bytes() {
        let a = map(json!({"x": 1, "y": 2, "z": 3, "w": 4}));
        let mut b = HashMap::new();
        for k in ["w", "z", "y", "x"] {
            b.insert(k.to_owned(), a[k].clone());
        }
        assert_eq!(encode(&a).unwrap(), encode(&b).unwrap());
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"\x01",
            b"\x81",
            b"\x81\x7f\x01",
            b"\x81\xa1",
            b"\x81\x00\xdd\xff\xff\xff\xff",
            b"\x81\x00\xc4\x05ab",
            b"\x81\x00\xa2\xff\xfe",
            b"\x81\x00\xc7\x01\x01\x00",
            b"\x80\x00",
            b"\xdf\xff\xff\xff\xff",
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        let mut deep = vec![0x81, 0x00];
        deep.extend(std::iter::repeat_n(0x91, 10_000));
        deep.push(0xc0);
        assert!(decode(&deep).is_err());
    }

    #[test]
    fn too_deep_a_value_is_an_error() {
        let mut v = json!(1);
        for _ in 0..200 {
            v = json!([v]);
        }
        assert!(encode(&map(json!({"d": v}))).is_err());
    }

    #[test]
    fn known_keys_are_unique_and_fit_one_byte() {
        assert_eq!(KNOWN.len(), KNOWN_KEYS.len());
        assert!(KNOWN_KEYS.len() < 128);
    }
}
