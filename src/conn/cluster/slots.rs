//! Where keys land on a cluster: the slot of a key (CRC16 of its hash tag,
//! as Redis computes it), the slot ranges a cluster's primaries serve, and
//! how a store's hash tags spread over them. A compact store of 2^b buckets
//! has only 2^(b-7) hash tags (groups of 128 buckets), so small stores can
//! load one primary more than another; [`tags_per_primary`] says by how
//! much before any data is written.

use std::ops::RangeInclusive;

use crate::error::{Error, Result};

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The slot `key` hashes to: CRC16 (XMODEM) of its hash tag (the text
/// between the first `{` and the next `}`, when not empty), else of the
/// whole key, modulo [`SLOTS`].
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS
}

/// The slot ranges `redis-cli --cluster create` gives `primaries` new
/// primaries: equal contiguous shares, in order.
pub fn even_ranges(primaries: usize) -> Vec<RangeInclusive<u16>> {
    let n = primaries.max(1);
    let per = f64::from(SLOTS) / n as f64;
    let mut first = 0u16;
    (0..n)
        .map(|i| {
            let last = if i + 1 == n {
                SLOTS - 1
            } else {
                ((per * (i + 1) as f64).round() as u16).saturating_sub(1)
            };
            let range = first..=last;
            first = last + 1;
            range
        })
        .collect()
}

/// The slot ranges each primary serving slots holds (`CLUSTER SLOTS` as
/// the node at `seed` sees it), by URL (reached as `seed` is: the same
/// scheme, user and password), sorted by URL.
pub async fn primary_ranges(
    seed: &str,
    options: &crate::conn::ConnectOptions,
) -> Result<Vec<(String, Vec<RangeInclusive<u16>>)>> {
    Ok(shards(seed, options)
        .await?
        .into_iter()
        .map(|shard| (shard.primary, shard.ranges))
        .collect())
}

/// A primary serving slots, as `CLUSTER SLOTS` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The primary's URL, reached as the seed asked is.
    pub primary: String,
    /// The slot ranges it serves.
    pub ranges: Vec<RangeInclusive<u16>>,
    /// Its replicas' URLs (those the node asked does not deem failed).
    pub replicas: Vec<String>,
}

/// The primaries serving slots as the node at `seed` sees them (`CLUSTER
/// SLOTS`), sorted by URL.
pub async fn shards(seed: &str, options: &crate::conn::ConnectOptions) -> Result<Vec<Shard>> {
    let mut conn = crate::conn::connect_with(seed, options).await?;
    shards_over(seed, &mut conn).await
}

/// [`shards`] over a connection to the node at `seed`.
pub(crate) async fn shards_over(
    seed: &str,
    conn: &mut impl redis::aio::ConnectionLike,
) -> Result<Vec<Shard>> {
    let reply: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    shards_in(seed, &reply)
}

/// The shards in a `CLUSTER SLOTS` reply, row by row: a row lists a
/// primary's replicas after it, and a reply read as a vector of 3-tuples
/// would be taken for a flat list as soon as one row has them.
pub(crate) fn shards_in(seed: &str, reply: &redis::Value) -> Result<Vec<Shard>> {
    let unexpected = || Error::Config(format!("{seed}: unexpected CLUSTER SLOTS reply"));
    let url_of = |node: &redis::Value| -> Result<String> {
        let node: Vec<redis::Value> = redis::from_redis_value_ref(node)?;
        let (Some(host), Some(port)) = (node.first(), node.get(1)) else {
            return Err(unexpected());
        };
        let host: String = redis::from_redis_value_ref(host)?;
        let port: u16 = redis::from_redis_value_ref(port)?;
        Ok(super::node_url(seed, &host, port))
    };
    let rows: Vec<Vec<redis::Value>> = redis::from_redis_value_ref(reply)?;
    let mut out: Vec<Shard> = Vec::new();
    for row in rows {
        let [first, last, primary, replicas @ ..] = row.as_slice() else {
            return Err(unexpected());
        };
        let first: u16 = redis::from_redis_value_ref(first)?;
        let last: u16 = redis::from_redis_value_ref(last)?;
        let primary = url_of(primary)?;
        let replicas = replicas.iter().map(url_of).collect::<Result<Vec<_>>>()?;
        match out.iter_mut().find(|s| s.primary == primary) {
            Some(shard) => {
                shard.ranges.push(first..=last);
                for replica in replicas {
                    if !shard.replicas.contains(&replica) {
                        shard.replicas.push(replica);
                    }
                }
            }
            None => out.push(Shard {
                primary,
                ranges: vec![first..=last],
                replicas,
            }),
        }
    }
    out.sort_by(|a, b| a.primary.cmp(&b.primary));
    Ok(out)
}

/// How many of `tags` (keys or hash tags) each primary serves, given the
/// slot ranges of each.
pub fn tags_per_primary(
    tags: impl IntoIterator<Item = String>,
    ranges: &[Vec<RangeInclusive<u16>>],
) -> Vec<u64> {
    let mut counts = vec![0; ranges.len()];
    for tag in tags {
        let slot = key_slot(tag.as_bytes());
        if let Some(i) = ranges
            .iter()
            .position(|r| r.iter().any(|r| r.contains(&slot)))
        {
            counts[i] += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_with_replicas_are_read_as_rows() {
        use redis::Value;
        let node = |port| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
                Value::Array(vec![]),
            ])
        };
        let row = |first, last, nodes: Vec<Value>| {
            let mut row = vec![Value::Int(first), Value::Int(last)];
            row.extend(nodes);
            Value::Array(row)
        };
        // The second primary's replica is listed; the others have none yet.
        let reply = Value::Array(vec![
            row(0, 5460, vec![node(7001)]),
            row(5461, 10922, vec![node(7002), node(7005)]),
            row(10923, 16383, vec![node(7003)]),
        ]);
        let found = shards_in("redis://127.0.0.1:7001/", &reply).unwrap();
        assert_eq!(found.len(), 3);
        assert_eq!(found[1].ranges, vec![5461..=10922]);
        assert_eq!(found[1].primary, "redis://127.0.0.1:7002/");
        assert_eq!(found[1].replicas, ["redis://127.0.0.1:7005/"]);
        assert!(found[0].replicas.is_empty());
        let bad = Value::Array(vec![Value::Array(vec![Value::Int(0)])]);
        assert!(matches!(
            shards_in("redis://127.0.0.1:7001/", &bad),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn slots_are_rediss() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"123456789"), 0x31c3 % SLOTS);
        // An empty tag hashes the whole key.
        assert_ne!(key_slot(b"a{}"), key_slot(b""));
    }

    #[test]
    fn even_ranges_match_redis_cli() {
        assert_eq!(even_ranges(3), [0..=5460, 5461..=10922, 10923..=16383]);
        let six = even_ranges(6);
        assert_eq!(*six[0].start(), 0);
        assert_eq!(*six[5].end(), SLOTS - 1);
        for pair in six.windows(2) {
            assert_eq!(*pair[0].end() + 1, *pair[1].start());
        }
    }

    #[test]
    fn counts_tags_by_primary() {
        let ranges: Vec<Vec<RangeInclusive<u16>>> =
            even_ranges(3).into_iter().map(|r| vec![r]).collect();
        let counts = tags_per_primary((0..300).map(|i| format!("{{{i}}}")), &ranges);
        assert_eq!(counts.iter().sum::<u64>(), 300);
        assert!(counts.iter().all(|&c| c > 50), "{counts:?}");
    }
}
