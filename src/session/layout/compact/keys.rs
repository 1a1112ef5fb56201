//! How the compact layout names its keys, and the keys one session's
//! calls need.

use super::{AnyBucket, Compact, GROUP_BITS, Route};
use crate::session::buckets::Buckets;
use crate::session::id::SessionId;
use crate::session::key_text;

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
}
