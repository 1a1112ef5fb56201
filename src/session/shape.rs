//! Where an id lives in a store whose buckets split and merge as it grows
//! and shrinks ([`crate::session::layout::CompactConfig::growing`]).
//!
//! The store's `2^G` groups are fixed: the top `G` bits of an id name its
//! group, and every key of a group shares the group's hash tag, so a
//! group lives in one Redis Cluster slot and one script may change any of
//! its keys. Within a group the buckets are the leaves of a binary trie:
//! the group's root covers every id of the group, and a bucket split in
//! two hands its ids to the child the next bit of the id names. A node is
//! numbered as in a heap (the root 1, the children of `n` are `2n` and
//! `2n + 1`), so a node's number says both its depth and its place, and
//! names its bucket's key: `sp:{3}:5` is group 3's bucket of the ids whose
//! next two bits are `01`.
//!
//! A group's shape (which nodes are split) is a bitmap in one small HASH
//! of the group, `sp:{3}:s`, beside an epoch that every split and merge
//! raises. Processes keep a copy and route by it; a copy may be stale, so
//! every bucket of the current shape holds a marker field (the empty
//! field), and a split or a merge removes the buckets it replaces, marker
//! and all, in the same script that writes the new shape:
//!
//! - a script given a bucket without the marker writes nothing and says so
//!   (`RESHAPED`), and the caller reads the shape again (a create checks
//!   the bucket's field count instead: every bucket key a growing store
//!   keeps holds its marker, so a bucket with no field at all is the same
//!   miss, and the count goes back with its reply);
//! - a read asks for the marker with the session's field, in one step:
//!   with the marker the bucket is current and a missing field a true
//!   miss; without it the caller reads the shape, and reads again if its
//!   copy was stale (a bucket that holds the field is current, so the
//!   short save and touch script reads the marker only after a miss, in
//!   the same script);
//! - a bucket of the current shape that lacks its marker (a group's first
//!   buckets, or one the sweeper emptied) is given one by a script that
//!   checks the shape's epoch first.
//!
//! A field is the id after the bucket's bits, as in
//! [`crate::session::buckets::Buckets`] with as many bits as the bucket's
//! level (`G` plus its depth): a split or a merge rewrites the fields it
//! moves. Groups are indexed for the sweeper in bands of seven levels: a
//! bucket's entry lives in the index of its ancestor at the band's top
//! depth (`sp:{3}:i1` for depths 0-6), as a member numbered as a heap
//! below that ancestor, so no index holds more than 64 buckets and each
//! stays a listpack.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::session::buckets::{Buckets, MAX_BUCKET_BITS, id_from};
use crate::session::id::SessionId;
use crate::session::key_text;

/// Depths a group's index bands span: a bucket's index entry lives with
/// its ancestor at a depth that is a multiple of this.
pub const INDEX_BAND: u8 = 7;

/// A node of a group's trie: a bucket while it is a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The group: the id's top `G` bits.
    pub group: u32,
    /// The node's number in the group's heap order, from 1 (the root).
    pub node: u32,
}

impl Node {
    /// The root of `group`.
    pub fn root(group: u32) -> Self {
        Self { group, node: 1 }
    }

    /// The node's depth below its group's root.
    pub fn depth(&self) -> u8 {
        (31 - self.node.leading_zeros()) as u8
    }

    /// The node's children: the ids whose next bit is 0, then 1.
    pub fn children(&self) -> (Self, Self) {
        let at = |node| Self {
            group: self.group,
            node,
        };
        (at(self.node * 2), at(self.node * 2 + 1))
    }

    /// The node's parent, `None` for a group's root.
    pub fn parent(&self) -> Option<Self> {
        (self.node > 1).then_some(Self {
            group: self.group,
            node: self.node / 2,
        })
    }

    /// The index node this node's entry lives in: its ancestor at the top
    /// depth of its band.
    pub fn index_node(&self) -> u32 {
        let below = self.depth() % INDEX_BAND;
        self.node >> below
    }

    /// The node's member in its index: its number as a heap below the
    /// index node, 1 to 127.
    pub fn index_member(&self) -> u32 {
        let below = self.depth() % INDEX_BAND;
        (1 << below) | (self.node & ((1 << below) - 1))
    }

    /// The node under index node `index_node` with member `member`.
    pub fn of_member(group: u32, index_node: u32, member: u32) -> Option<Self> {
        if member == 0 || member >= 1 << INDEX_BAND || index_node == 0 {
            return None;
        }
        let below = 31 - member.leading_zeros();
        let node = (index_node << below) | (member & ((1 << below) - 1));
        (index_node.leading_zeros() >= below).then_some(Self { group, node })
    }
}

/// One group's shape: which of its trie's nodes are split, and how many
/// times that changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupShape {
    epoch: u64,
    trie: Vec<u8>,
}

impl GroupShape {
    /// A shape as the group's HASH holds it: its epoch and the bitmap of
    /// split nodes (bit `n` of the bitmap, most significant bit first, as
    /// `SETBIT` counts, is node `n`).
    pub fn new(epoch: u64, trie: Vec<u8>) -> Self {
        Self { epoch, trie }
    }

    /// How many splits and merges made this shape.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The bitmap of split nodes.
    pub fn trie(&self) -> &[u8] {
        &self.trie
    }

    /// Whether node `n` is split.
    pub fn is_split(&self, n: u32) -> bool {
        let byte = (n / 8) as usize;
        self.trie
            .get(byte)
            .is_some_and(|b| b >> (7 - n % 8) & 1 == 1)
    }

    /// The leaf an id whose bits below the group are `path` (most
    /// significant first) falls in, no deeper than `max_depth`.
    pub fn leaf_of(&self, path: u64, max_depth: u8) -> u32 {
        let mut node = 1u32;
        let mut depth = 0u8;
        while depth < max_depth && self.is_split(node) {
            let bit = (path >> (63 - u32::from(depth))) & 1;
            node = node * 2 + bit as u32;
            depth += 1;
        }
        node
    }

    /// Every leaf, in heap order of their paths (left to right).
    pub fn leaves(&self, max_depth: u8) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack = vec![1u32];
        while let Some(n) = stack.pop() {
            let depth = (31 - n.leading_zeros()) as u8;
            if depth < max_depth && self.is_split(n) {
                stack.push(n * 2 + 1);
                stack.push(n * 2);
            } else {
                out.push(n);
            }
        }
        out
    }
}

/// How a growing store names its keys and routes its ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    groups: Buckets,
}

impl Shape {
    /// The shape of a store whose groups are `groups`' buckets (`G` is
    /// their bit count).
    pub fn new(groups: Buckets) -> Self {
        Self { groups }
    }

    /// The groups, as buckets of `G` bits.
    pub fn groups(&self) -> &Buckets {
        &self.groups
    }

    /// The number of groups.
    pub fn group_count(&self) -> u32 {
        self.groups.count()
    }

    /// How deep a group's trie may grow: to 24 bits of bucket in all.
    pub fn max_depth(&self) -> u8 {
        MAX_BUCKET_BITS - self.groups.bits()
    }

    /// The group an id falls in.
    pub fn group_of(&self, id: &SessionId) -> u32 {
        self.groups.bucket_of(id)
    }

    /// The id's bits below its group, most significant first.
    fn path(&self, id: &SessionId) -> u64 {
        let b = id.as_bytes();
        let head = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        head << self.groups.bits()
    }

    /// The bucket an id falls in by `shape`, its group's shape.
    pub fn leaf(&self, shape: &GroupShape, id: &SessionId) -> Node {
        Node {
            group: self.group_of(id),
            node: shape.leaf_of(self.path(id), self.max_depth()),
        }
    }

    /// A node's level: the bits of id that name it.
    pub fn level(&self, node: Node) -> u8 {
        self.groups.bits() + node.depth()
    }

    /// The bit of a split's ids that chooses the child, as its place in
    /// the first byte of the split bucket's fields (0 the top bit).
    pub fn split_bit(&self, node: Node) -> u8 {
        self.level(node) % 8
    }

    /// The field an id is stored under in bucket `node`.
    pub fn field(&self, node: Node, id: &SessionId) -> Vec<u8> {
        let level = self.level(node);
        let skip = usize::from(level / 8);
        let mut field = id.as_bytes()[skip..].to_vec();
        field[0] &= 0xff >> (level % 8);
        field
    }

    /// Rebuilds an id from bucket `node` and a field of it, or `None` if
    /// the field is not one that bucket's ids have.
    pub fn id_of(&self, node: Node, field: &[u8]) -> Option<SessionId> {
        id_from(
            Self::prefix(node),
            self.level(node),
            field,
            self.groups.id_width(),
        )
    }

    /// The bits of id that name bucket `node`: its group's, then the path
    /// from the group's root to it.
    fn prefix(node: Node) -> u64 {
        let depth = node.depth();
        (u64::from(node.group) << depth) | u64::from(node.node - (1 << depth))
    }

    /// Where `id` falls among the ids of bucket `node`, as a field of it:
    /// the id's own field if the bucket holds its ids; an empty field (below
    /// every field) if all the bucket's ids sort after it; one longer than
    /// any, all ones, if they all sort before it. The session cap places
    /// its cutoff, an id, in each bucket so.
    pub fn field_at(&self, node: Node, id: &SessionId) -> Vec<u8> {
        let level = self.level(node);
        let b = id.as_bytes();
        let head = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        match Self::prefix(node).cmp(&(head >> (64 - u32::from(level)))) {
            std::cmp::Ordering::Equal => self.field(node, id),
            std::cmp::Ordering::Greater => Vec::new(),
            std::cmp::Ordering::Less => vec![0xff; self.field_len(node) + 1],
        }
    }

    /// The length of every field of bucket `node`.
    pub fn field_len(&self, node: Node) -> usize {
        self.groups.id_width().bytes() - usize::from(self.level(node) / 8)
    }

    /// The longest field any bucket has: a group root's.
    pub fn longest_field(&self) -> usize {
        self.groups.field_len()
    }

    /// The hash tag a group's keys share, braces included.
    pub fn tag(&self, group: u32) -> String {
        self.groups.tag(group)
    }

    /// The HASH of bucket `node`.
    pub fn bucket_key(&self, node: Node) -> String {
        let mut key = self.tagged(node.group, 9);
        key.push(':');
        key_text::push_hex(&mut key, u64::from(node.node), 0);
        key
    }

    /// Chunk `chunk` of bucket `node`'s viewed items ([`crate::viewed`]).
    pub fn viewed_key(&self, node: Node, chunk: usize) -> String {
        format!("{}:v{chunk}", self.bucket_key(node))
    }

    /// The index ZSET of index node `index_node` of `group`.
    pub fn index_key(&self, group: u32, index_node: u32) -> String {
        let mut key = self.tagged(group, 10);
        key.push_str(":i");
        key_text::push_hex(&mut key, u64::from(index_node), 0);
        key
    }

    /// The index ZSET bucket `node`'s entry lives in.
    pub fn index_of(&self, node: Node) -> String {
        self.index_key(node.group, node.index_node())
    }

    /// The HASH of a group's shape.
    pub fn shape_key(&self, group: u32) -> String {
        format!("{}:{}:s", self.groups.namespace(), self.tag(group))
    }

    /// The key of a record stored out of line: named after the whole id,
    /// so a split leaves it where it is.
    pub fn out_of_line_key(&self, id: &SessionId) -> String {
        let bytes = id.as_bytes();
        let mut key = self.tagged(self.group_of(id), 3 + 2 * bytes.len());
        key.push_str(":o:");
        key_text::push_hex_bytes(&mut key, bytes);
        key
    }

    /// `namespace:{tag}` of `group`, with room for `more` bytes.
    fn tagged(&self, group: u32, more: usize) -> String {
        key_text::tagged(
            self.groups.namespace(),
            group,
            self.groups.tag_width(),
            more,
        )
    }

    /// A log-safe description of where an id lives.
    pub fn location(&self, id: &SessionId) -> String {
        format!(
            "{}:{} (session {})",
            self.groups.namespace(),
            self.tag(self.group_of(id)),
            id.redacted()
        )
    }
}

/// A process's copies of its groups' shapes, each with when the read
/// that brought it was sent.
#[derive(Debug, Default)]
pub struct ShapeCache {
    shapes: RwLock<HashMap<u32, (Arc<GroupShape>, Instant)>>,
    unsplit: Arc<GroupShape>,
}

impl ShapeCache {
    /// The shape this process has of `group`: unsplit until it learns
    /// otherwise.
    pub fn get(&self, group: u32) -> Arc<GroupShape> {
        let shapes = self.shapes.read().unwrap_or_else(|e| e.into_inner());
        shapes
            .get(&group)
            .map(|(shape, _)| shape.clone())
            .unwrap_or_else(|| self.unsplit.clone())
    }

    /// The shape this process has of `group` if the read that brought it
    /// was sent less than `age` ago: whatever replaced a bucket it names
    /// did so since then.
    pub fn fresh(&self, group: u32, age: Duration) -> Option<Arc<GroupShape>> {
        let shapes = self.shapes.read().unwrap_or_else(|e| e.into_inner());
        shapes
            .get(&group)
            .filter(|(_, sent)| sent.elapsed() < age)
            .map(|(shape, _)| shape.clone())
    }

    /// Keeps `shape`, read from the server by a read sent at `sent`, for
    /// `group`, unless the copy kept came from a read sent later (replies
    /// to reads on several connections come in any order). Returns the
    /// copy kept.
    pub fn set(&self, group: u32, shape: GroupShape, sent: Instant) -> Arc<GroupShape> {
        let shape = Arc::new(shape);
        let mut shapes = self.shapes.write().unwrap_or_else(|e| e.into_inner());
        match shapes.get(&group) {
            Some((kept, at)) if *at > sent => kept.clone(),
            _ => {
                shapes.insert(group, (shape.clone(), sent));
                shape
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(bits: u8) -> Shape {
        Shape::new(Buckets::new("sp", bits).unwrap())
    }

    fn split(trie: &mut Vec<u8>, n: u32) {
        let byte = (n / 8) as usize;
        if trie.len() <= byte {
            trie.resize(byte + 1, 0);
        }
        trie[byte] |= 0x80 >> (n % 8);
    }

    #[test]
    fn an_unsplit_group_is_one_bucket() {
        let s = shape(4);
        let id = SessionId::parse("3fa0c0ffee00112233445566778899aabbccddee").unwrap();
        let leaf = s.leaf(&GroupShape::default(), &id);
        assert_eq!(leaf, Node::root(3));
        assert_eq!(s.bucket_key(leaf), "sp:{3}:1");
        assert_eq!(s.index_of(leaf), "sp:{3}:i1");
        assert_eq!(s.shape_key(3), "sp:{3}:s");
        assert_eq!(
            s.out_of_line_key(&id),
            "sp:{3}:o:3fa0c0ffee00112233445566778899aabbccddee"
        );
        assert_eq!(s.index_key(3, 0x2b), "sp:{3}:i2b");
        // Four bits of bucket: the field is the whole id, its top four
        // bits zeroed.
        assert_eq!(s.field(leaf, &id)[0], 0x0f);
        assert_eq!(s.field(leaf, &id).len(), 20);
    }

    #[test]
    fn splits_route_by_the_next_bits() {
        let s = shape(4);
        let mut trie = Vec::new();
        split(&mut trie, 1);
        split(&mut trie, 3);
        let g = GroupShape::new(2, trie);
        assert_eq!(g.leaves(s.max_depth()), vec![2, 6, 7]);
        // 0x3f: group 3; next bits of 0xf = 1111 -> node 3 split -> 7.
        let id = SessionId::parse("3fa0c0ffee00112233445566778899aabbccddee").unwrap();
        let leaf = s.leaf(&g, &id);
        assert_eq!(leaf.node, 7);
        assert_eq!(s.level(leaf), 6);
        assert_eq!(s.split_bit(leaf), 6);
        assert_eq!(s.field(leaf, &id)[0], 0x3f & 0x03);
        // 0x37: next bits 0111 -> node 2.
        let id = SessionId::parse("37a0c0ffee00112233445566778899aabbccddee").unwrap();
        assert_eq!(s.leaf(&g, &id).node, 2);
    }

    #[test]
    fn fields_shrink_at_a_byte_boundary() {
        let s = shape(7);
        let id = SessionId::generate().unwrap();
        let root = s.leaf(&GroupShape::default(), &id);
        assert_eq!(s.field_len(root), 20);
        let (a, b) = root.children();
        assert_eq!(s.field_len(a), 19);
        assert_eq!(s.field_len(b), 19);
        // The split bit is the last bit of the root's first field byte.
        assert_eq!(s.split_bit(root), 7);
        let child = if id.as_bytes()[0] & 1 == 0 { a } else { b };
        assert_eq!(s.field(child, &id), id.as_bytes()[1..].to_vec());
    }

    #[test]
    fn index_bands_hold_at_most_64_buckets_and_members_map_back() {
        for node in 1..(1u32 << 16) {
            let n = Node { group: 5, node };
            let member = n.index_member();
            assert!((1..128).contains(&member));
            assert_eq!(Node::of_member(5, n.index_node(), member), Some(n));
        }
        // Depths 0-6 share index node 1; depth 7 starts the next band.
        assert_eq!(
            Node {
                group: 0,
                node: 127
            }
            .index_node(),
            1
        );
        assert_eq!(
            Node {
                group: 0,
                node: 128
            }
            .index_node(),
            128
        );
        assert_eq!(Node::of_member(0, 1, 0), None);
        assert_eq!(Node::of_member(0, 1, 128), None);
    }

    #[test]
    fn an_id_is_rebuilt_from_its_bucket_and_field_at_every_depth() {
        // Every node split: an id's leaf is as deep as a trie goes.
        let all = GroupShape::new(1, vec![0xff; 1 << 21]);
        for bits in [1, 4, 7, 8, 13] {
            let s = shape(bits);
            for _ in 0..100 {
                let id = SessionId::generate().unwrap();
                let leaf = s.leaf(&all, &id);
                assert_eq!(leaf.depth(), s.max_depth());
                // The leaf and each of its ancestors.
                for up in 0..=leaf.depth() {
                    let node = Node {
                        group: leaf.group,
                        node: leaf.node >> up,
                    };
                    let field = s.field(node, &id);
                    assert_eq!(s.id_of(node, &field), Some(id), "{bits} bits, {node:?}");
                }
                let mut longer = s.field(leaf, &id);
                longer.push(0);
                assert_eq!(s.id_of(leaf, &longer), None);
            }
        }
    }

    #[test]
    fn an_id_falls_among_a_buckets_fields_as_among_all_ids() {
        let s = shape(4);
        let all = GroupShape::new(1, vec![0xff; 1 << 21]);
        for _ in 0..200 {
            let (a, b) = (
                SessionId::generate().unwrap(),
                SessionId::generate().unwrap(),
            );
            // Bucket a's ancestors at every depth, b's place among them.
            let leaf = s.leaf(&all, &a);
            for up in 0..=leaf.depth() {
                let node = Node {
                    group: leaf.group,
                    node: leaf.node >> up,
                };
                let at = s.field_at(node, &b);
                let field = s.field(node, &a);
                assert_eq!(field <= at, a.as_bytes() <= b.as_bytes(), "{node:?}");
            }
        }
    }

    #[test]
    fn the_cache_keeps_what_it_was_given() {
        let cache = ShapeCache::default();
        assert_eq!(cache.get(9).epoch(), 0);
        cache.set(9, GroupShape::new(3, vec![0x40]), Instant::now());
        assert_eq!(cache.get(9).epoch(), 3);
        assert!(cache.get(9).is_split(1));
        assert_eq!(cache.get(8).epoch(), 0);
    }

    #[test]
    fn depth_is_bounded_by_the_bucket_bits() {
        let s = shape(20);
        assert_eq!(s.max_depth(), 4);
        let all = GroupShape::new(1, vec![0xff; 8]);
        let id = SessionId::generate().unwrap();
        assert_eq!(s.leaf(&all, &id).depth(), 4);
        assert_eq!(all.leaves(s.max_depth()).len(), 16);
    }
}
