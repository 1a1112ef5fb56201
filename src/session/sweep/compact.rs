//! Sweeping the compact layout: the index of each group of buckets names
//! the buckets that may hold expired sessions, and one script per group
//! sweeps them and rescores their index entries.

use super::cap::{cutoff_among, sample_buckets};
use super::step::{Cutoff, RangeOutcome, counted};
use crate::error::{Error, Result};
use crate::scripts::{self, COMPACT_CAP, COMPACT_EVICT, COMPACT_SWEEP};
use crate::session::layout::Compact;
use crate::session::layout::compact::AnyBucket;
use crate::session::layout::compact::value_expiry;
use crate::session::shape::Node;
use std::collections::{BTreeMap, BTreeSet};

/// A bucket's field and value, as `HGETALL` returns them.
type FieldValue = (Vec<u8>, Vec<u8>);

/// Groups swept per pipeline.
const PIPELINE: usize = 64;

/// Sweeps `groups`: the buckets their indexes say are due at `now`, or
/// with `full` every bucket of each group (which also restores index
/// entries that were lost or are stale).
pub(super) async fn sweep_groups<C>(
    layout: &Compact<C>,
    groups: std::ops::Range<u32>,
    now: u64,
    full: bool,
) -> Result<RangeOutcome>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    if layout.shape().is_some() {
        return sweep_growing(layout, groups, now, full).await;
    }
    let scheme = layout.scheme();
    let conn = layout.connection();
    let mut out = RangeOutcome::default();
    let groups: Vec<u32> = groups.collect();
    for chunk in groups.chunks(PIPELINE) {
        let due: Vec<Vec<u32>> = if full {
            chunk
                .iter()
                .map(|&g| {
                    let buckets = scheme.group_buckets(g);
                    (0..buckets.end - buckets.start).collect()
                })
                .collect()
        } else {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &g in chunk {
                pipe.cmd("ZRANGE")
                    .arg(scheme.index_key(g))
                    .arg("-inf")
                    .arg(now)
                    .arg("BYSCORE");
            }
            let replies: Vec<redis::RedisResult<Vec<u32>>> =
                pipe.query_async(&mut conn.clone()).await?;
            let mut due = Vec::with_capacity(chunk.len());
            for (&g, reply) in chunk.iter().zip(replies) {
                match reply {
                    Ok(members) => due.push(members),
                    Err(e) => {
                        out.bucket_failed(scheme.group_buckets(g).start, e)?;
                        due.push(Vec::new());
                    }
                }
            }
            due
        };
        let work: Vec<(u32, &Vec<u32>)> = chunk
            .iter()
            .copied()
            .zip(due.iter())
            .filter(|(_, members)| !members.is_empty())
            .collect();
        if work.is_empty() {
            continue;
        }
        let invocations: Vec<_> = work
            .iter()
            .map(|&(g, members)| {
                let base = scheme.group_buckets(g).start;
                let mut inv = COMPACT_SWEEP.prepare_invoke();
                inv.key(scheme.index_key(g));
                for &m in members {
                    inv.key(scheme.bucket_key(base + m));
                }
                for &m in members {
                    for key in layout.viewed_keys(base + m) {
                        inv.key(key);
                    }
                }
                inv.arg(members.len());
                for &m in members {
                    inv.arg(m);
                }
                for _ in members {
                    inv.arg(layout.buckets().field_len());
                }
                inv
            })
            .collect();
        let replies = scripts::pipelined_each(conn, &invocations, &COMPACT_SWEEP).await?;
        for (&(g, _), reply) in work.iter().zip(replies) {
            let base = scheme.group_buckets(g).start;
            let Some(parts) = group_reply(reply, base, &mut out)? else {
                continue;
            };
            for member in add_swept(&parts, &mut out) {
                bad_member(member, base, &mut out);
            }
        }
    }
    Ok(out)
}

/// [`sweep_groups`] for a growing store ([`crate::session::shape`]): each
/// group's shape read first, then the buckets its indexes name as due (or
/// all its buckets), one script per index; then each group whose buckets
/// call for it reshaped ([`Compact::reshape_groups`]): a bucket left over
/// the split threshold split, two siblings that emptied merged. A bucket
/// split or merged after its shape was read is found empty, which changes
/// nothing.
async fn sweep_growing<C>(
    layout: &Compact<C>,
    groups: std::ops::Range<u32>,
    now: u64,
    full: bool,
) -> Result<RangeOutcome>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let Some(shape) = layout.shape() else {
        return Ok(RangeOutcome::default());
    };
    let conn = layout.connection();
    let mut out = RangeOutcome::default();
    let groups: Vec<u32> = groups.collect();
    for chunk in groups.chunks(PIPELINE) {
        let shapes = layout.fetch_shapes(chunk).await?;
        let leaves: Vec<Vec<Node>> = chunk
            .iter()
            .zip(&shapes)
            .map(|(&group, s)| {
                s.leaves(shape.max_depth())
                    .into_iter()
                    .map(|node| Node { group, node })
                    .collect()
            })
            .collect();
        // The buckets to sweep, by index.
        let mut work: BTreeMap<(u32, u32), Vec<Node>> = BTreeMap::new();
        if full {
            for node in leaves.iter().flatten() {
                work.entry((node.group, node.index_node()))
                    .or_default()
                    .push(*node);
            }
        } else {
            let indexes: BTreeSet<(u32, u32)> = leaves
                .iter()
                .flatten()
                .map(|n| (n.group, n.index_node()))
                .collect();
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &(group, index) in &indexes {
                pipe.cmd("ZRANGE")
                    .arg(shape.index_key(group, index))
                    .arg("-inf")
                    .arg(now)
                    .arg("BYSCORE");
            }
            let replies: Vec<redis::RedisResult<Vec<u32>>> =
                pipe.query_async(&mut conn.clone()).await?;
            for (&(group, index), reply) in indexes.iter().zip(replies) {
                match reply {
                    Ok(members) => {
                        let due: Vec<Node> = members
                            .into_iter()
                            .filter_map(|m| Node::of_member(group, index, m))
                            .collect();
                        if !due.is_empty() {
                            work.insert((group, index), due);
                        }
                    }
                    Err(e) => out.bucket_failed(group, e)?,
                }
            }
        }
        let work: Vec<((u32, u32), Vec<Node>)> = work.into_iter().collect();
        let invocations: Vec<_> = work
            .iter()
            .map(|((group, index), nodes)| {
                let mut inv = COMPACT_SWEEP.prepare_invoke();
                inv.key(shape.index_key(*group, *index));
                for &node in nodes {
                    inv.key(shape.bucket_key(node));
                }
                for &node in nodes {
                    for key in layout.chunk_keys_of(AnyBucket::Grown(node)) {
                        inv.key(key);
                    }
                }
                inv.arg(nodes.len());
                for node in nodes {
                    inv.arg(node.index_member());
                }
                for &node in nodes {
                    inv.arg(shape.field_len(node));
                }
                inv
            })
            .collect();
        let replies = scripts::pipelined_each(conn, &invocations, &COMPACT_SWEEP).await?;
        for (((group, _), _), reply) in work.iter().zip(replies) {
            let Some(parts) = group_reply(reply, *group, &mut out)? else {
                continue;
            };
            for _ in add_swept(&parts, &mut out) {
                out.bad_bucket(*group, "a bucket of another type or value".into());
            }
        }
        reshape_where_due(layout, &leaves, &mut out).await?;
    }
    Ok(out)
}

/// Reshapes the groups among `leaves` (each group's buckets) that hold a
/// bucket over the split threshold or two siblings under the merge one,
/// by their field counts read now.
async fn reshape_where_due<C>(
    layout: &Compact<C>,
    leaves: &[Vec<Node>],
    out: &mut RangeOutcome,
) -> Result<()>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let (Some(shape), Some((split_above, merge_at_most))) =
        (layout.shape(), layout.reshape_thresholds())
    else {
        return Ok(());
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for node in leaves.iter().flatten() {
        pipe.hlen(shape.bucket_key(*node));
    }
    let counts: Vec<redis::RedisResult<u64>> =
        pipe.query_async(&mut layout.connection().clone()).await?;
    let mut counts = counts.into_iter();
    let mut due_groups = Vec::new();
    for group in leaves {
        let count: BTreeMap<u32, u64> = group
            .iter()
            .map(|n| (n.node, counts.next().and_then(|c| c.ok()).unwrap_or(0)))
            .collect();
        // Counts include each bucket's marker.
        let due = count.iter().any(|(&node, &n)| {
            n > split_above + 1
                || (node % 2 == 0
                    && node > 1
                    && count
                        .get(&(node + 1))
                        .is_some_and(|&m| n + m <= merge_at_most + 2))
        });
        if let (true, Some(first)) = (due, group.first()) {
            due_groups.push(first.group);
        }
    }
    if !due_groups.is_empty() {
        let done = layout.reshape_groups(&due_groups).await?;
        out.splits += done.splits;
        out.merges += done.merges;
    }
    Ok(())
}

/// Fields held in all buckets (`HLEN`): sessions, sessions expired but not
/// yet swept (the cap runs right after a pass has swept), and the pieces of
/// records and markers, which [`place_cutoff`] discounts by its sample;
/// not a growing store's bucket markers. Buckets of another type are left
/// out.
pub(super) async fn count_sessions<C>(layout: &Compact<C>) -> Result<u64>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let every = layout.every_bucket().await?;
    let marked = u64::from(layout.shape().is_some());
    let mut total = 0;
    for chunk in every.chunks(4096) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &b in chunk {
            pipe.hlen(layout.key_of(b));
        }
        let replies: Vec<redis::RedisResult<u64>> =
            pipe.query_async(&mut layout.connection().clone()).await?;
        for reply in replies {
            total += counted(reply)?.map_or(0, |n| n.saturating_sub(marked));
        }
    }
    Ok(total)
}

/// The cap's cutoff from the live entries of a sample of buckets (all of
/// them up to 4,096): the `ceil(q s)`-th smallest (expiry, field) of the
/// `s` sampled, `q` the share to evict. `fields` is [`count_sessions`]'
/// count, of which the sample's share of sessions are sessions. A growing
/// store's fields are of several lengths, so its cutoff names the whole
/// id: (expiry, id) order.
pub(super) async fn place_cutoff<C>(
    layout: &Compact<C>,
    now: u64,
    fields: u64,
    max: u64,
) -> Result<Option<Cutoff>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let every = layout.every_bucket().await?;
    let growing = layout.shape().is_some();
    let sample = sample_buckets(u32::try_from(every.len()).unwrap_or(u32::MAX));
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    let (mut sampled_fields, mut sampled_sessions) = (0u64, 0u64);
    for chunk in sample.chunks(512) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in chunk {
            pipe.hgetall(layout.key_of(every[i as usize]));
        }
        let replies: Vec<redis::RedisResult<Vec<FieldValue>>> =
            pipe.query_async(&mut layout.connection().clone()).await?;
        for (&i, reply) in chunk.iter().zip(replies) {
            let b = every[i as usize];
            let field_len = layout.field_len_in(b);
            // A bucket of another type: the eviction reports it.
            for (field, value) in counted(reply)?.into_iter().flatten() {
                if field.is_empty() {
                    // A growing store's bucket marker.
                    continue;
                }
                sampled_fields += 1;
                // Sessions only: not the pieces of their records, nor markers.
                if field.len() != field_len {
                    continue;
                }
                sampled_sessions += 1;
                let Some(expiry) = value_expiry(&value).filter(|&e| e > now) else {
                    continue;
                };
                let order = if growing {
                    layout.id_in(b, &field).map(|id| id.as_bytes().to_vec())
                } else {
                    Some(field)
                };
                entries.extend(order.map(|o| (expiry, o)));
            }
        }
    }
    let total = if sampled_fields == 0 {
        fields
    } else {
        (fields as f64 * sampled_sessions as f64 / sampled_fields as f64).round() as u64
    };
    Ok(cutoff_among(entries, total, max))
}

/// A session the cap evicts with its record out of line: its field, and
/// its record's key.
type OutOfLine = (Vec<u8>, String);

/// Buckets that one cap script visits: those of one index, each with its
/// member there.
struct CapUnit {
    index: String,
    buckets: Vec<(AnyBucket, u32)>,
}

/// The cap's scripts: one per group of a store of fixed buckets, one per
/// index of each group (a band of its trie) of a growing store, by the
/// shapes read now.
async fn cap_units<C>(layout: &Compact<C>) -> Result<Vec<CapUnit>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let Some(shape) = layout.shape() else {
        let scheme = layout.scheme();
        return Ok((0..scheme.groups())
            .map(|g| {
                let buckets = scheme.group_buckets(g);
                CapUnit {
                    index: scheme.index_key(g),
                    buckets: buckets
                        .clone()
                        .map(|b| (AnyBucket::Fixed(b), b - buckets.start))
                        .collect(),
                }
            })
            .collect());
    };
    let mut units: BTreeMap<(u32, u32), CapUnit> = BTreeMap::new();
    for b in layout.every_bucket().await? {
        let AnyBucket::Grown(node) = b else { continue };
        units
            .entry((node.group, node.index_node()))
            .or_insert_with(|| CapUnit {
                index: shape.index_key(node.group, node.index_node()),
                buckets: Vec::new(),
            })
            .buckets
            .push((b, node.index_member()));
    }
    Ok(units.into_values().collect())
}

/// The number a bucket is reported by: a fixed bucket's own, a growing
/// store's bucket's group.
fn reported(b: AnyBucket) -> u32 {
    match b {
        AnyBucket::Fixed(n) => n,
        AnyBucket::Grown(node) => node.group,
    }
}

/// The cutoff's field as bucket `b` orders its fields.
fn cutoff_in<C>(layout: &Compact<C>, b: AnyBucket, cutoff: &Cutoff) -> Vec<u8>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    match (b, layout.shape()) {
        (AnyBucket::Grown(node), Some(shape)) => {
            crate::session::id::SessionId::from_slice(&cutoff.field)
                .map_or_else(Vec::new, |id| shape.field_at(node, &id))
        }
        _ => cutoff.field.clone(),
    }
}

/// Removes from every bucket the sessions at or before `cutoff` (and the
/// expired ones), index by index; live sessions with records out of line
/// go with their record keys in a second script per bucket.
pub(super) async fn evict<C>(layout: &Compact<C>, cutoff: &Cutoff) -> Result<RangeOutcome>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let conn = layout.connection();
    let mut out = RangeOutcome::default();
    let units = cap_units(layout).await?;
    for chunk in units.chunks(PIPELINE) {
        let invocations: Vec<_> = chunk
            .iter()
            .map(|unit| {
                let mut inv = COMPACT_CAP.prepare_invoke();
                inv.key(&unit.index);
                for &(b, _) in &unit.buckets {
                    inv.key(layout.key_of(b));
                }
                for &(b, _) in &unit.buckets {
                    for key in layout.chunk_keys_of(b) {
                        inv.key(key);
                    }
                }
                inv.arg(cutoff.expiry);
                for &(b, member) in &unit.buckets {
                    inv.arg(member)
                        .arg(layout.field_len_in(b))
                        .arg(cutoff_in(layout, b, cutoff));
                }
                inv
            })
            .collect();
        let replies = scripts::pipelined_each(conn, &invocations, &COMPACT_CAP).await?;
        let mut out_of_line: Vec<(AnyBucket, Vec<OutOfLine>)> = Vec::new();
        for (unit, reply) in chunk.iter().zip(replies) {
            let bucket_of = |member: i64| {
                unit.buckets
                    .iter()
                    .find(|(_, m)| i64::from(*m) == member)
                    .map(|&(b, _)| b)
            };
            out.buckets += unit.buckets.len() as u64;
            let first = unit.buckets.first().map_or(0, |&(b, _)| reported(b));
            let Some(parts) = group_reply(reply, first, &mut out)? else {
                continue;
            };
            let int = |i: usize| int_at(&parts, i).max(0) as u64;
            out.reclaimed += int(0);
            out.evicted += int(1);
            let pairs = int(2) as usize;
            for pair in parts[3..3 + 2 * pairs].chunks(2) {
                let member: i64 = redis::from_redis_value_ref(&pair[0]).unwrap_or(-1);
                let field: Vec<u8> = redis::from_redis_value_ref(&pair[1]).unwrap_or_default();
                let Some(b) = bucket_of(member) else { continue };
                let Some(key) = out_of_line_key(layout, b, &field) else {
                    continue;
                };
                match out_of_line.iter_mut().find(|(at, _)| *at == b) {
                    Some((_, fields)) => fields.push((field, key)),
                    None => out_of_line.push((b, vec![(field, key)])),
                }
            }
            for member in &parts[3 + 2 * pairs..] {
                let m: i64 = redis::from_redis_value_ref(member).unwrap_or(0);
                let (member, why) = if m >= 0 {
                    (m, "WRONGTYPE: a bucket key of another type")
                } else {
                    (
                        -m - 1,
                        "CORRUPT: a value in neither the integer nor the binary form",
                    )
                };
                let at = bucket_of(member).map_or(first, reported);
                out.bad_bucket(at, why.into());
            }
        }
        if out_of_line.is_empty() {
            continue;
        }
        let invocations: Vec<_> = out_of_line
            .iter()
            .map(|(b, fields)| {
                let mut inv = COMPACT_EVICT.prepare_invoke();
                inv.key(layout.key_of(*b));
                for (_, key) in fields {
                    inv.key(key);
                }
                for key in layout.chunk_keys_of(*b) {
                    inv.key(key);
                }
                inv.arg(cutoff.expiry).arg(cutoff_in(layout, *b, cutoff));
                for (field, _) in fields {
                    inv.arg(field);
                }
                inv
            })
            .collect();
        let replies = scripts::pipelined_each(conn, &invocations, &COMPACT_EVICT).await?;
        for ((b, _), reply) in out_of_line.iter().zip(replies) {
            match reply.and_then(|v| redis::from_redis_value::<u64>(v).map_err(Into::into)) {
                Ok(n) => out.evicted += n,
                Err(e) => out.bucket_failed(reported(*b), e)?,
            }
        }
    }
    Ok(out)
}

/// The key of the record out of line of the session under `field` in
/// bucket `b`; `None` for a field no id of a growing store's has (no
/// session of the store's is under it).
fn out_of_line_key<C>(layout: &Compact<C>, b: AnyBucket, field: &[u8]) -> Option<String>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    match (b, layout.shape()) {
        (AnyBucket::Grown(node), Some(shape)) => shape
            .id_of(node, field)
            .map(|id| shape.out_of_line_key(&id)),
        _ => Some(layout.scheme().out_of_line_key(reported(b), field)),
    }
}

/// A group script's reply as its parts; `None` (the group reported bad at
/// its first bucket) if the script failed on the server.
fn group_reply(
    reply: redis::RedisResult<redis::Value>,
    base: u32,
    out: &mut RangeOutcome,
) -> Result<Option<Vec<redis::Value>>> {
    match reply {
        Ok(value) => redis::from_redis_value(value)
            .map(Some)
            .map_err(|e| Error::Config(format!("unexpected reply from a group script: {e}"))),
        Err(e) => {
            out.bucket_failed(base, e)?;
            Ok(None)
        }
    }
}

/// Adds a sweep script's counts to `out`; returns the members of the
/// buckets it skipped.
fn add_swept<'a>(parts: &'a [redis::Value], out: &mut RangeOutcome) -> &'a [redis::Value] {
    let int = |i: usize| int_at(parts, i);
    out.reclaimed += int(0).max(0) as u64;
    out.buckets += int(2).max(0) as u64;
    if int(1) >= 0 {
        let oldest = int(1) as u64;
        out.oldest_removed = Some(out.oldest_removed.map_or(oldest, |o| o.min(oldest)));
    }
    parts.get(3..).unwrap_or_default()
}

/// Reports a bucket a group script skipped: its member for a key of
/// another type, `-(member + 1)` for one holding a value in neither form.
fn bad_member(member: &redis::Value, base: u32, out: &mut RangeOutcome) {
    let m: i64 = redis::from_redis_value_ref(member).unwrap_or(0);
    if m >= 0 {
        out.bad_bucket(
            base + m as u32,
            "WRONGTYPE: a bucket key of another type".into(),
        );
    } else {
        out.bad_bucket(
            base + (-m - 1) as u32,
            "CORRUPT: a value in neither the integer nor the binary form".into(),
        );
    }
}

/// The integer at `i` of a reply, or -1.
fn int_at(parts: &[redis::Value], i: usize) -> i64 {
    parts
        .get(i)
        .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
        .unwrap_or(-1)
}
