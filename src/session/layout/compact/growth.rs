//! A compact store that grows and shrinks ([`CompactConfig::growing`]):
//! routing by the group shapes this process keeps
//! ([`crate::session::shape`]), following a bucket that was split or
//! merged under a call, and the splits and merges themselves.
//!
//! A bucket splits when a write leaves it holding more than
//! [`SPLIT_FIELDS`] fields (a namespace recorded before that count was
//! recorded: three quarters of `hash-max-listpack-entries`): the write's
//! own script replies with the bucket's field count, and the writer splits
//! it before its call returns. Each child then holds about half of that,
//! so buckets hold 32 to 64 entries, never near the 512 at which Redis
//! would convert one, whatever the store has grown to: small enough that
//! a lookup's scan and a write's move of the listpack cost no more than in
//! the fixed bucket count that costs the server least, and full enough to
//! keep within 5% of the bytes of the one that costs least memory for
//! sessions of a hundred bytes and more from 3k sessions on; identities
//! alone take 3.5-18.5% more (`sessionpack bench growth`, `sessionpack bench
//! tower --growing`). Two sibling buckets merge
//! back when together they hold at most four fifths of the split
//! threshold ([`Compact::reshape_groups`], which the sweeper runs on the
//! groups it sweeps), so a merged bucket has room to grow before it
//! splits again.
//!
//! [`CompactConfig::growing`]: super::CompactConfig::growing

use std::sync::Arc;

use super::grown::Grown;
use super::{Compact, Keys};
use crate::error::{Error, Result};
use crate::limits::ListpackLimits;
use crate::scripts::{self, COMPACT_CLAIM, COMPACT_MERGE, COMPACT_SPLIT};
use crate::session::id::SessionId;
use crate::session::shape::{GroupShape, INDEX_BAND, Node, Shape, ShapeCache};

/// How many times one call follows its bucket to where a split or merge
/// moved it before it gives up with [`Error::Reshaped`].
pub(crate) const REROUTES: u32 = 8;

/// What a growing store knows of its shape, and when it reshapes.
#[derive(Debug)]
pub(crate) struct Growth {
    pub(crate) shape: Shape,
    pub(crate) cache: ShapeCache,
    /// A bucket holding more fields than this splits.
    pub(crate) split_above: u64,
    /// Two sibling buckets holding at most this many fields together merge.
    pub(crate) merge_at_most: u64,
}

/// The bucket a call was routed to, and the epoch of the shape it was
/// routed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) node: Node,
    pub(crate) epoch: u64,
}

/// A new growing store's buckets split above this many fields
/// ([`crate::session::meta::StoreMeta::split_fields`]): about as full as
/// the fixed bucket count that costs the server least per call; the
/// bytes are within 5% of the fewest-bytes count's for sessions of a
/// hundred bytes and more, 3.5-18.5% above it for identities alone.
pub const SPLIT_FIELDS: u64 = 64;

impl Growth {
    /// Growth for buckets of `shape`, splitting above `split_fields`
    /// fields (0: three quarters of the server's entry limit, as stores
    /// recorded before the count was recorded do; never above that), and
    /// merging two buckets at four fifths of it.
    pub(crate) fn new(shape: Shape, limits: ListpackLimits, split_fields: u64) -> Self {
        let most = (limits.hash_entries * 3 / 4).max(2);
        let split_above = match split_fields {
            0 => most,
            n => n.clamp(2, most),
        };
        Self {
            shape,
            cache: ShapeCache::default(),
            split_above,
            merge_at_most: split_above * 4 / 5,
        }
    }

    /// Where `id`'s record goes when it is out of line: named after the
    /// whole id, so a split leaves it where it is.
    pub(crate) fn out_of_line_key(&self, id: &SessionId) -> String {
        self.shape.out_of_line_key(id)
    }

    /// The names a call on `id` needs, routed by this process's copy of
    /// its group's shape.
    pub(crate) fn keys(&self, id: &SessionId) -> Keys {
        self.keys_by(id, &self.cache.get(self.shape.group_of(id)))
    }

    /// The names a call on `id` needs, routed by `shape`, its group's.
    pub(crate) fn keys_by(&self, id: &SessionId, shape: &GroupShape) -> Keys {
        let group = self.shape.group_of(id);
        let node = self.shape.leaf(shape, id);
        Keys {
            bucket: self.shape.bucket_key(node),
            index: self.shape.index_of(node),
            member: node.index_member(),
            field: self.shape.field(node, id),
            // Its viewed chunks are named by the route's node.
            bucket_no: group,
            id: *id,
            route: Some(Route {
                node,
                epoch: shape.epoch(),
            }),
        }
    }
}

/// A group's shape HASH as `HMGET epoch trie` reads it.
type ShapeFields = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What [`Compact::reshape_groups`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reshaping {
    /// Buckets split.
    pub splits: u64,
    /// Pairs of buckets merged.
    pub merges: u64,
    /// Buckets in the groups afterwards.
    pub buckets: u64,
}

/// A bucket of a store of either kind, for the passes that read every
/// bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnyBucket {
    /// A bucket of a store of fixed buckets, by its number.
    Fixed(u32),
    /// A bucket of a growing store, by its node.
    Grown(Node),
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Every bucket of the store: its fixed ones, or each group's by its
    /// shape read now.
    pub(crate) async fn every_bucket(&self) -> Result<Vec<AnyBucket>> {
        let Some(growth) = self.growth() else {
            return Ok((0..self.buckets().count()).map(AnyBucket::Fixed).collect());
        };
        let groups: Vec<u32> = (0..growth.shape.group_count()).collect();
        let mut out = Vec::new();
        for chunk in groups.chunks(1024) {
            let shapes = self.fetch_shapes(chunk).await?;
            for (&group, shape) in chunk.iter().zip(shapes) {
                out.extend(
                    shape
                        .leaves(growth.shape.max_depth())
                        .into_iter()
                        .map(|node| AnyBucket::Grown(Node { group, node })),
                );
            }
        }
        Ok(out)
    }

    /// The HASH of bucket `b`.
    pub(crate) fn key_of(&self, b: AnyBucket) -> String {
        match (b, self.shape()) {
            (AnyBucket::Grown(node), Some(shape)) => shape.bucket_key(node),
            (AnyBucket::Fixed(n), _) | (AnyBucket::Grown(Node { group: n, .. }), None) => {
                self.scheme().bucket_key(n)
            }
        }
    }

    /// The length of a session's field in bucket `b`.
    pub(crate) fn field_len_in(&self, b: AnyBucket) -> usize {
        match (b, self.shape()) {
            (AnyBucket::Grown(node), Some(shape)) => shape.field_len(node),
            _ => self.buckets().field_len(),
        }
    }

    /// The id a field of bucket `b` names, or `None` if it names none.
    pub(crate) fn id_in(&self, b: AnyBucket, field: &[u8]) -> Option<SessionId> {
        match (b, self.shape()) {
            (AnyBucket::Grown(node), Some(shape)) => shape.id_of(node, field),
            (AnyBucket::Fixed(n), _) => self.buckets().id_of(n, field),
            (AnyBucket::Grown(_), None) => None,
        }
    }

    /// The store's shape, if it grows.
    pub fn shape(&self) -> Option<&Shape> {
        self.growth.as_deref().map(|g| &g.shape)
    }

    pub(crate) fn growth(&self) -> Option<&Growth> {
        self.growth.as_deref()
    }

    /// Reads `group`'s shape from the server and keeps it.
    pub async fn fetch_shape(&self, group: u32) -> Result<Arc<GroupShape>> {
        let mut shapes = self.fetch_shapes(&[group]).await?;
        shapes
            .pop()
            .ok_or_else(|| Error::Config("no reply for a group's shape".into()))
    }

    /// Reads the shapes of `groups` from the server in one pipeline, and
    /// keeps them.
    pub async fn fetch_shapes(&self, groups: &[u32]) -> Result<Vec<Arc<GroupShape>>> {
        let growth = self.growing()?;
        let keys: Vec<String> = groups.iter().map(|&g| growth.shape.shape_key(g)).collect();
        let sent = std::time::Instant::now();
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("HMGET").arg(key).arg("epoch").arg("trie");
        }
        let replies: Vec<ShapeFields> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || keys.join(", ")))?;
        groups
            .iter()
            .zip(&keys)
            .zip(replies)
            .map(|((&group, key), (epoch, trie))| {
                // Only split and merge scripts write it: anything else
                // there is damage, not a shape to route by.
                let epoch = match epoch {
                    None => 0,
                    Some(text) => std::str::from_utf8(&text)
                        .ok()
                        .and_then(|t| t.parse::<u64>().ok())
                        .ok_or_else(|| Error::CorruptRecord {
                            location: key.clone(),
                            reason: "the group's shape has an epoch that is not a number".into(),
                        })?,
                };
                let shape = GroupShape::new(epoch, trie.unwrap_or_default());
                Ok(growth.cache.set(group, shape, sent))
            })
            .collect()
    }

    /// The split and merge thresholds, in fields, of a growing store.
    pub fn reshape_thresholds(&self) -> Option<(u64, u64)> {
        self.growth().map(|g| (g.split_above, g.merge_at_most))
    }

    fn growing(&self) -> Result<&Growth> {
        self.growth.as_deref().ok_or_else(|| {
            Error::Config(format!(
                "namespace {:?} is a store of fixed buckets, which has no shape",
                self.buckets().namespace()
            ))
        })
    }

    /// After a call on `id` found the bucket `k` names without its marker:
    /// whether the call should go again, the shape read now routing `id`
    /// elsewhere. Where it routes `id` to the same bucket, that is a
    /// current one that was never marked (a group's first): a write
    /// (`claim`) gives it its marker and goes again; a read goes again
    /// only if the shape changed since it was routed (the bucket moved
    /// away and back), else has its answer, none.
    pub(crate) async fn reroute(&self, id: &SessionId, k: &Keys, claim: bool) -> Result<bool> {
        let (Some(growth), Some(route)) = (self.growth(), k.route) else {
            return Ok(false);
        };
        let group = route.node.group;
        let shape = self.fetch_shape(group).await?;
        if growth.shape.leaf(&shape, id) != route.node {
            return Ok(true);
        }
        if shape.epoch() == 0 && self.split_since_read(group).await? {
            // Split by another call after the shape was read: route again.
            return Ok(true);
        }
        if !claim {
            // Moved away and back since the read, or never marked.
            return Ok(shape.epoch() != route.epoch);
        }
        // Marked by the epoch read now, not the one routed by: other
        // buckets of a busy group split and merge between any two reads.
        let epoch: u64 = COMPACT_CLAIM
            .key(growth.shape.shape_key(group))
            .key(&k.bucket)
            .arg(shape.epoch())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        if epoch != shape.epoch() {
            self.fetch_shape(group).await?;
        }
        Ok(true)
    }

    /// Checks that `group`, whose shape read as never split, has no bucket
    /// below its root. One means either that another call split the group
    /// since the read (true: the caller routes again), or, where the shape
    /// read again still says never split, that the shape key was lost or
    /// reset (deleted by hand, say), and routing by it would miss every
    /// session of the group and write a root of its own: an error. A split
    /// writes its buckets and the shape in one script, so a bucket below
    /// the root with the shape unsplit is never a split in progress. One
    /// `EXISTS` (a command every role has) of the buckets at depths 1 to 6
    /// and of the indexes of depths 7 to 13 (over 8,000 buckets a group);
    /// only calls that find a group's root unmarked pay it.
    async fn split_since_read(&self, group: u32) -> Result<bool> {
        let growth = self.growing()?;
        let s = &growth.shape;
        let band = 1u32 << INDEX_BAND;
        let mut keys: Vec<String> = (2..band)
            .map(|node| s.bucket_key(Node { group, node }))
            .collect();
        keys.extend((band..2 * band).map(|n| s.index_key(group, n)));
        let found: u64 = redis::cmd("EXISTS")
            .arg(&keys)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || s.tag(group)))?;
        if found == 0 {
            return Ok(false);
        }
        if self.fetch_shape(group).await?.epoch() != 0 {
            return Ok(true);
        }
        Err(Error::CorruptRecord {
            location: s.shape_key(group),
            reason: "the group's shape is missing or reset, but buckets it split into are \
                     there: restore the shape key (its sessions cannot be found without it)"
                .into(),
        })
    }

    /// After a write left `fields` fields in the bucket `k` names: splits
    /// it if that is over the threshold. A split that fails is logged and
    /// left to the next write or the sweeper: the write itself is done.
    pub(crate) async fn split_if_full(&self, k: &Keys, fields: u64) {
        let (Some(growth), Some(route)) = (self.growth(), k.route) else {
            return;
        };
        // The marker is a field too.
        if fields <= growth.split_above + 1 {
            return;
        }
        if let Err(e) = self.split(route.node, route.epoch).await {
            tracing::warn!(
                bucket = k.bucket,
                error = %e,
                "could not split a full bucket; the next write to it or the sweeper will"
            );
        }
    }

    /// Splits bucket `node` if it is one of the current shape and holds
    /// more fields than the threshold. Returns whether it was split; the
    /// shape is read again where it changed since `epoch`, the epoch of
    /// the shape this process routed by.
    pub async fn split(&self, node: Node, epoch: u64) -> Result<bool> {
        let growth = self.growing()?;
        if node.depth() >= growth.shape.max_depth() {
            return Ok(false);
        }
        let (c0, c1) = node.children();
        let done = self
            .reshape(
                &COMPACT_SPLIT,
                [node, c0, c1],
                epoch,
                growth.shape.split_bit(node),
                growth.split_above,
            )
            .await?;
        Ok(done)
    }

    /// Merges the children of `parent` if both are buckets of the current
    /// shape and together hold at most the merge threshold. Returns
    /// whether they were merged.
    pub async fn merge(&self, parent: Node, epoch: u64) -> Result<bool> {
        let growth = self.growing()?;
        let (c0, c1) = parent.children();
        self.reshape(
            &COMPACT_MERGE,
            [parent, c0, c1],
            epoch,
            growth.shape.split_bit(parent),
            growth.merge_at_most,
        )
        .await
    }

    /// A split or merge script on a parent and its children.
    async fn reshape(
        &self,
        script: &redis::Script,
        nodes: [Node; 3],
        epoch: u64,
        bit: u8,
        limit: u64,
    ) -> Result<bool> {
        let [parent, ..] = nodes;
        let key = self.growing()?.shape.bucket_key(parent);
        let (done, now): (u8, u64) = self
            .reshape_call(script, nodes, bit, limit)?
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        if now != epoch || done == 1 {
            self.fetch_shape(parent.group).await?;
        }
        Ok(done == 1)
    }

    /// The call of a split or merge script on a parent and its children
    /// (`shape_common.lua`). The script checks the shape it acts on, so
    /// calls on distinct parents may go in one pipeline.
    fn reshape_call<'s>(
        &self,
        script: &'s redis::Script,
        [parent, c0, c1]: [Node; 3],
        bit: u8,
        limit: u64,
    ) -> Result<redis::ScriptInvocation<'s>> {
        let s = &self.growing()?.shape;
        let chunks = self.viewed_chunks();
        let mut inv = script.prepare_invoke();
        inv.key(s.shape_key(parent.group))
            .key(s.bucket_key(parent))
            .key(s.bucket_key(c0))
            .key(s.bucket_key(c1))
            .key(s.index_of(parent))
            .key(s.index_of(c0))
            .key(s.index_of(c1));
        for node in [parent, c0, c1] {
            for c in 0..chunks {
                inv.key(s.viewed_key(node, c));
            }
        }
        inv.arg(parent.node)
            .arg(bit)
            .arg(limit)
            .arg(parent.index_member())
            .arg(c0.index_member())
            .arg(c1.index_member())
            .arg(chunks)
            .arg(if self.marks() {
                super::MOVED_MARK_SECS
            } else {
                0
            });
        Ok(inv)
    }

    /// The buckets of `group`, by its shape read now.
    pub async fn group_buckets(&self, group: u32) -> Result<Vec<Node>> {
        let growth = self.growing()?;
        let shape = self.fetch_shape(group).await?;
        Ok(shape
            .leaves(growth.shape.max_depth())
            .into_iter()
            .map(|node| Node { group, node })
            .collect())
    }

    /// Brings `group` to the shape its sessions call for
    /// ([`Compact::reshape_groups`]).
    pub async fn reshape_group(&self, group: u32) -> Result<Reshaping> {
        self.reshape_groups(&[group]).await
    }

    /// Brings `groups` to the shapes their sessions call for: splits each
    /// bucket over the split threshold (a write's split that failed), and
    /// merges each pair of sibling buckets that together hold at most the
    /// merge threshold, repeatedly, so a group that emptied folds back to
    /// its root. Each round reads the groups' shapes and their buckets'
    /// field counts, then sends every split and merge they call for in one
    /// pipeline, one script each; a group that shrank a lot folds one
    /// level per round. `buckets` counts the groups' buckets afterwards.
    pub async fn reshape_groups(&self, groups: &[u32]) -> Result<Reshaping> {
        let growth = self.growing()?;
        let s = &growth.shape;
        let mut out = Reshaping::default();
        let mut pending: Vec<u32> = groups.to_vec();
        for _ in 0..=s.max_depth() {
            if pending.is_empty() {
                break;
            }
            let shapes = self.fetch_shapes(&pending).await?;
            let leaves: Vec<Node> = pending
                .iter()
                .zip(&shapes)
                .flat_map(|(&group, shape)| {
                    shape
                        .leaves(s.max_depth())
                        .into_iter()
                        .map(move |node| Node { group, node })
                })
                .collect();
            let mut pipe = redis::pipe();
            for &node in &leaves {
                pipe.hlen(s.bucket_key(node));
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| Error::from_redis(e, || s.tag(pending[0])))?;
            let count: std::collections::HashMap<Node, u64> =
                leaves.iter().copied().zip(counts).collect();
            // (group, split?) of each call, in the calls' order.
            let mut calls = Vec::new();
            let mut invocations = Vec::new();
            for &node in &leaves {
                // Counts include each bucket's marker.
                if count[&node] > growth.split_above + 1 {
                    let (c0, c1) = node.children();
                    let bit = s.split_bit(node);
                    invocations.push(self.reshape_call(
                        &COMPACT_SPLIT,
                        [node, c0, c1],
                        bit,
                        growth.split_above,
                    )?);
                    calls.push((node.group, true));
                }
            }
            // Sibling leaves, each pair once: from the left child.
            for &node in &leaves {
                let sibling = Node {
                    node: node.node + 1,
                    ..node
                };
                if node.node % 2 != 0 || node.node == 1 || !count.contains_key(&sibling) {
                    continue;
                }
                if count[&node] + count[&sibling] <= growth.merge_at_most + 2 {
                    let parent = node.parent().expect("a node below the root");
                    invocations.push(self.reshape_call(
                        &COMPACT_MERGE,
                        [parent, node, sibling],
                        s.split_bit(parent),
                        growth.merge_at_most,
                    )?);
                    calls.push((node.group, false));
                }
            }
            if calls.is_empty() {
                out.buckets += leaves.len() as u64;
                break;
            }
            let replies = scripts::pipelined_calls(
                &self.conn,
                &invocations,
                &[&COMPACT_SPLIT, &COMPACT_MERGE],
            )
            .await?;
            let mut changed = std::collections::BTreeSet::new();
            for (&(group, split), reply) in calls.iter().zip(replies) {
                let (done, _): (u8, u64) = reply
                    .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
                    .map_err(|e| Error::from_redis(e, || s.tag(group)))?;
                if done == 1 {
                    changed.insert(group);
                    if split {
                        out.splits += 1;
                    } else {
                        out.merges += 1;
                    }
                }
            }
            // Groups that changed nothing are as their sessions call for.
            for (group, shape) in pending.iter().zip(&shapes) {
                if !changed.contains(group) {
                    out.buckets += shape.leaves(s.max_depth()).len() as u64;
                }
            }
            pending.retain(|g| changed.contains(g));
        }
        for &group in &pending {
            out.buckets += self.group_buckets(group).await?.len() as u64;
        }
        Ok(out)
    }
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Script calls on `ids` in one pipeline, `build` making each for the
    /// keys its id is routed to. In a growing store a call that found its
    /// bucket split or merged away goes again in a later pipeline, routed
    /// anew (as [`Compact::call`] does for one), and a call that leaves its
    /// bucket full splits it.
    pub(super) async fn call_each<T: redis::FromRedisValue>(
        &self,
        ids: &[SessionId],
        script: &redis::Script,
        build: impl Fn(&SessionId, &Keys) -> redis::ScriptInvocation<'static>,
    ) -> Result<Vec<T>> {
        use std::collections::HashMap;
        if self.growth.is_none() {
            let invocations: Vec<_> = ids.iter().map(|id| build(id, &self.keys(id))).collect();
            return crate::session::layout::pipeline::pipelined(
                &self.conn,
                self,
                ids,
                &invocations,
                script,
            )
            .await;
        }
        let mut out: Vec<Option<T>> = ids.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..ids.len()).collect();
        for _ in 0..REROUTES {
            if pending.is_empty() {
                break;
            }
            let keys: Vec<Keys> = pending.iter().map(|&i| self.keys(&ids[i])).collect();
            let invocations: Vec<_> = pending
                .iter()
                .zip(&keys)
                .map(|(&i, k)| build(&ids[i], k))
                .collect();
            let replies = crate::scripts::pipelined_each(&self.conn, &invocations, script).await?;
            // The last count each bucket reported, and the buckets to
            // follow, each once.
            let mut full: HashMap<&str, (u64, usize)> = HashMap::new();
            let mut moved: HashMap<&str, usize> = HashMap::new();
            let mut again = Vec::new();
            for (n, reply) in replies.into_iter().enumerate() {
                let (i, k) = (pending[n], &keys[n]);
                match reply {
                    Ok(value) => {
                        let Grown { reply, fields } = redis::from_redis_value(value)?;
                        out[i] = Some(reply);
                        full.insert(&k.bucket, (fields, n));
                    }
                    Err(e) if super::is_reshaped(&e) => {
                        moved.entry(&k.bucket).or_insert(n);
                        again.push(i);
                    }
                    Err(e) => return Err(self.error(&ids[i])(e)),
                }
            }
            for (fields, n) in full.into_values() {
                self.split_if_full(&keys[n], fields).await;
            }
            for n in moved.into_values() {
                self.reroute(&ids[pending[n]], &keys[n], true).await?;
            }
            pending = again;
        }
        if let Some(&i) = pending.first() {
            return Err(self.reshaped(&ids[i]));
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// [`crate::session::layout::Layout::insert_many`] for a growing
    /// store: pipelines of insert scripts, each pipeline adding at most a
    /// quarter of the room a bucket has above the split threshold to any
    /// one bucket, then the buckets the pipeline filled split before the
    /// next. Calls that found their bucket split away (or not yet marked:
    /// a group's first bucket) go again in a later pipeline, routed anew.
    pub(super) async fn insert_many_growing(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<crate::session::layout::Inserted>> {
        use crate::session::layout::Inserted;
        use crate::ttl::Deadline;
        use std::collections::HashMap;
        let growth = self.growing()?;
        let room = (self.limits.hash_entries.saturating_sub(growth.split_above) / 4).max(1);
        let script = self.script(&crate::scripts::COMPACT_INSERT);
        let mut out: Vec<Option<Inserted>> = vec![None; items.len()];
        // Items still to insert, and how many times each went back.
        let mut pending: std::collections::VecDeque<(usize, u32)> =
            (0..items.len()).map(|i| (i, 0)).collect();
        while !pending.is_empty() {
            // Take items until one would add too much to its bucket.
            let mut added: HashMap<String, u64> = HashMap::new();
            let mut chunk: Vec<(usize, u32, Keys)> = Vec::new();
            while let Some(&(i, tries)) = pending.front() {
                if chunk.len() == crate::scripts::PIPELINE_CHUNK {
                    break;
                }
                let (id, record) = &items[i];
                let k = self.keys(id);
                let entries = 1 + self.piece_fields(&k.field, record.len()).len() as u64;
                let total = added.entry(k.bucket.clone()).or_default();
                if *total + entries > room && !chunk.is_empty() {
                    break;
                }
                *total += entries;
                pending.pop_front();
                chunk.push((i, tries, k));
            }
            // Index entries first, as for one insert; again for a call
            // that goes again, whose entry is written anew.
            let indexed_at = self
                .index_add_many(chunk.iter().map(|(i, _, _)| &items[*i]))
                .await?;
            let invocations: Vec<_> = chunk
                .iter()
                .map(|(i, _, k)| {
                    self.insert_invocation(k, &items[*i].1, Deadline::In(ttl_secs), indexed_at)
                })
                .collect();
            let replies = crate::scripts::pipelined_each(&self.conn, &invocations, script).await?;
            // The fullest count each bucket reported, and the buckets to
            // follow.
            let mut full: HashMap<&str, (u64, usize)> = HashMap::new();
            let mut moved: HashMap<&str, usize> = HashMap::new();
            for (n, reply) in replies.into_iter().enumerate() {
                let (i, tries, k) = &chunk[n];
                let id = &items[*i].0;
                match reply {
                    Ok(value) => {
                        let Grown::<i64> {
                            reply: code,
                            fields,
                        } = redis::from_redis_value(value)?;
                        out[*i] = Some(Inserted::from_code(code));
                        full.insert(&k.bucket, (fields, n));
                    }
                    Err(e) if super::is_reshaped(&e) && *tries < REROUTES => {
                        moved.entry(&k.bucket).or_insert(n);
                        pending.push_back((*i, tries + 1));
                    }
                    Err(e) if super::is_reshaped(&e) => return Err(self.reshaped(id)),
                    Err(e) => return Err(self.error(id)(e)),
                }
            }
            for (fields, n) in full.into_values() {
                self.split_if_full(&chunk[n].2, fields).await;
            }
            // Once per bucket: read its group's shape, or mark it.
            for n in moved.into_values() {
                let (i, _, k) = &chunk[n];
                self.reroute(&items[*i].0, k, true).await?;
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}
