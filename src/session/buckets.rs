//! Bucket addressing: which bucket an id falls in, the field it is stored
//! under, and the names of the bucket's keys.
//!
//! A bucket is the top `bits` bits of the id. Its keys share one hash tag,
//! `{<bucket in hex>}`, so they live in one Redis Cluster slot and one script
//! may change them together: `sp:{3fa0}:h` (HASH), `sp:{3fa0}:z` (ZSET) and
//! `sp:{3fa0}:o:<field hex>` (a record stored out of line). When `bits` is a
//! multiple of four the tag is the cookie id's first `bits / 4` characters.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::session::id::{IdWidth, SessionId};
use crate::session::key_text;

/// Fewest bucket bits accepted (2 buckets).
pub const MIN_BUCKET_BITS: u8 = 1;
/// Most bucket bits accepted (16,777,216 buckets).
pub const MAX_BUCKET_BITS: u8 = 24;
/// The default key namespace.
pub const DEFAULT_NAMESPACE: &str = "sp";

/// How ids map to buckets and buckets to keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buckets {
    namespace: String,
    bits: u8,
    #[serde(default)]
    width: IdWidth,
}

impl Buckets {
    /// `2^bits` buckets under `namespace`.
    ///
    /// The namespace may not contain `{` or `}`, which would break the
    /// bucket's hash tag.
    pub fn new(namespace: impl Into<String>, bits: u8) -> Result<Self> {
        let namespace = namespace.into();
        if !(MIN_BUCKET_BITS..=MAX_BUCKET_BITS).contains(&bits) {
            return Err(Error::Config(format!(
                "bucket bits must be {MIN_BUCKET_BITS}..={MAX_BUCKET_BITS}, got {bits}"
            )));
        }
        if namespace.is_empty() || namespace.contains(['{', '}']) {
            return Err(Error::Config(format!(
                "namespace must be non-empty and free of braces, got {namespace:?}"
            )));
        }
        Ok(Self {
            namespace,
            bits,
            width: IdWidth::default(),
        })
    }

    /// The same buckets for ids of `width`.
    pub fn with_id_width(mut self, width: IdWidth) -> Self {
        self.width = width;
        self
    }

    /// The width of the ids the buckets hold.
    pub fn id_width(&self) -> IdWidth {
        self.width
    }

    /// The number of bucket bits.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// The number of buckets, `2^bits`.
    pub fn count(&self) -> u32 {
        1 << self.bits
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The bucket an id falls in: its top `bits` bits.
    pub fn bucket_of(&self, id: &SessionId) -> u32 {
        let b = id.as_bytes();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) >> (32 - u32::from(self.bits))
    }

    /// The same id moved into `bucket` (its prefix bits replaced). The
    /// benchmark harness uses this to emulate a larger population in a
    /// fraction of the buckets.
    pub fn with_bucket(&self, id: &SessionId, bucket: u32) -> SessionId {
        let mut bytes = id.as_bytes().to_vec();
        let keep = (1u32 << (32 - u32::from(self.bits))) - 1;
        let head = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let head = (head & keep) | (bucket << (32 - u32::from(self.bits)));
        bytes[..4].copy_from_slice(&head.to_be_bytes());
        SessionId::from_slice(&bytes).unwrap_or(*id)
    }

    /// The bytes an id is stored under within its bucket: the id after the
    /// bucket prefix, with the prefix's bits in a shared byte zeroed.
    pub fn field(&self, id: &SessionId) -> Vec<u8> {
        let skip = usize::from(self.bits / 8);
        let mut field = id.as_bytes()[skip..].to_vec();
        field[0] &= 0xff >> (self.bits % 8);
        field
    }

    /// Length of every field, in bytes.
    pub fn field_len(&self) -> usize {
        self.width.bytes() - usize::from(self.bits / 8)
    }

    /// Rebuilds an id from its bucket and field, or `None` if the field is
    /// not one this scheme produces.
    pub fn id_of(&self, bucket: u32, field: &[u8]) -> Option<SessionId> {
        if bucket >= self.count() {
            return None;
        }
        id_from(u64::from(bucket), self.bits, field, self.width)
    }

    /// The hash tag shared by a bucket's keys, braces included.
    pub fn tag(&self, bucket: u32) -> String {
        let mut tag = String::with_capacity(self.tag_width() + 2);
        key_text::push_tag(&mut tag, bucket, self.tag_width());
        tag
    }

    /// The hex digits of a tag.
    pub(crate) fn tag_width(&self) -> usize {
        usize::from(self.bits.div_ceil(4))
    }

    /// The bucket's HASH of field -> record.
    pub fn hash_key(&self, bucket: u32) -> String {
        format!("{}:{}:h", self.namespace, self.tag(bucket))
    }

    /// The bucket's ZSET of field -> expiry.
    pub fn zset_key(&self, bucket: u32) -> String {
        format!("{}:{}:z", self.namespace, self.tag(bucket))
    }

    /// The key holding one session's record when it is too large to keep in
    /// the bucket.
    pub fn out_of_line_key(&self, bucket: u32, field: &[u8]) -> String {
        format!(
            "{}:{}:o:{}",
            self.namespace,
            self.tag(bucket),
            hex::encode(field)
        )
    }

    /// A log-safe description of where an id lives.
    pub fn location(&self, id: &SessionId) -> String {
        format!(
            "{}:{} (session {})",
            self.namespace,
            self.tag(self.bucket_of(id)),
            id.redacted()
        )
    }
}

/// Rebuilds an id of `width` from the `bits`-bit `prefix` that names its
/// bucket and the field it is stored under there, or `None` if the field
/// is not one that bucket's fields can be (its length, or bits of the
/// prefix set in its first byte).
pub(crate) fn id_from(prefix: u64, bits: u8, field: &[u8], width: IdWidth) -> Option<SessionId> {
    let len = width.bytes();
    if bits == 0 || bits > 32 || field.len() != len - usize::from(bits / 8) {
        return None;
    }
    let skip = len - field.len();
    if field[0] & !(0xff >> (bits % 8)) != 0 {
        return None;
    }
    let mut bytes = vec![0u8; len];
    bytes[skip..].copy_from_slice(field);
    let prefix = (prefix << (64 - u32::from(bits))).to_be_bytes();
    for (byte, p) in bytes.iter_mut().zip(prefix.iter()).take(skip + 1) {
        *byte |= p;
    }
    SessionId::from_slice(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> SessionId {
        SessionId::parse(text).unwrap()
    }

    #[test]
    fn sixteen_bits_use_the_cookie_prefix() {
        let b = Buckets::new("sp", 16).unwrap();
        let id = id("3fa0c0ffee00112233445566778899aabbccddee");
        assert_eq!(b.bucket_of(&id), 0x3fa0);
        assert_eq!(b.hash_key(0x3fa0), "sp:{3fa0}:h");
        assert_eq!(b.zset_key(0x3fa0), "sp:{3fa0}:z");
        assert_eq!(
            b.field(&id),
            hex::decode("c0ffee00112233445566778899aabbccddee").unwrap()
        );
        assert_eq!(b.field_len(), 18);
    }

    #[test]
    fn odd_bit_counts_mask_the_shared_byte() {
        let b = Buckets::new("sp", 12).unwrap();
        let id = id("3fa0c0ffee00112233445566778899aabbccddee");
        assert_eq!(b.bucket_of(&id), 0x3fa);
        assert_eq!(b.tag(0x3fa), "{3fa}");
        assert_eq!(b.field(&id)[0], 0xa0 & 0x0f);
        assert_eq!(b.field(&id).len(), 19);

        let b = Buckets::new("sp", 1).unwrap();
        assert_eq!(b.bucket_of(&id), 0);
        assert_eq!(b.tag(1), "{1}");
        assert_eq!(b.count(), 2);
    }

    #[test]
    fn ids_rebuild_from_bucket_and_field() {
        for bits in MIN_BUCKET_BITS..=MAX_BUCKET_BITS {
            let b = Buckets::new("sp", bits).unwrap();
            for _ in 0..20 {
                let id = SessionId::generate().unwrap();
                let field = b.field(&id);
                assert_eq!(field.len(), b.field_len());
                assert!(b.bucket_of(&id) < b.count());
                assert_eq!(b.id_of(b.bucket_of(&id), &field), Some(id), "bits {bits}");
            }
        }
    }

    #[test]
    fn narrow_ids_rebuild_from_bucket_and_field() {
        for bits in [1, 8, 13, 20, 24] {
            let b = Buckets::new("sp", bits)
                .unwrap()
                .with_id_width(IdWidth::Bits128);
            let id = SessionId::generate_with(IdWidth::Bits128).unwrap();
            let field = b.field(&id);
            assert_eq!(field.len(), 16 - usize::from(bits / 8));
            assert_eq!(b.id_of(b.bucket_of(&id), &field), Some(id), "bits {bits}");
        }
    }

    #[test]
    fn ids_move_between_buckets() {
        for bits in [1, 7, 16, 24] {
            let b = Buckets::new("sp", bits).unwrap();
            let id = SessionId::generate().unwrap();
            let moved = b.with_bucket(&id, b.count() - 1);
            assert_eq!(b.bucket_of(&moved), b.count() - 1);
            assert_eq!(b.field(&moved), b.field(&id));
        }
    }

    #[test]
    fn refuses_bad_configuration() {
        assert!(Buckets::new("sp", 0).is_err());
        assert!(Buckets::new("sp", 25).is_err());
        assert!(Buckets::new("a{b", 8).is_err());
        assert!(Buckets::new("", 8).is_err());
    }
}
