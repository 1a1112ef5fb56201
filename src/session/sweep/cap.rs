//! The session cap: how many sessions are live, where the cutoff falls, and
//! who may enforce it.

use rand::seq::index;

use super::step::{Cutoff, counted};
use crate::error::Result;
use crate::session::buckets::Buckets;

/// Buckets whose entries are sampled to place the cutoff.
const SAMPLE_BUCKETS: u32 = 4096;
/// Buckets counted per pipeline.
const COUNT_PIPELINE: u32 = 4096;
/// Buckets sampled per pipeline.
const SAMPLE_PIPELINE: usize = 512;

/// A ZSET entry as `ZRANGE ... WITHSCORES` returns it: field, expiry.
type Entry = (Vec<u8>, f64);

/// Live sessions in all buckets: `ZCOUNT` of expiries after `now`. A bucket
/// whose ZSET is of another type is left out (the eviction sweep that
/// follows reports it).
pub(super) async fn count_live<C>(conn: &C, b: &Buckets, now: u64) -> Result<u64>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    let count = b.count();
    let after = format!("({now}");
    let mut total = 0u64;
    for start in (0..count).step_by(COUNT_PIPELINE as usize) {
        let end = (start + COUNT_PIPELINE).min(count);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for bucket in start..end {
            pipe.cmd("ZCOUNT")
                .arg(b.zset_key(bucket))
                .arg(&after)
                .arg("+inf");
        }
        let replies: Vec<redis::RedisResult<u64>> = pipe.query_async(&mut conn.clone()).await?;
        for reply in replies {
            total += counted(reply)?.unwrap_or(0);
        }
    }
    Ok(total)
}

/// The cutoff that keeps about `max` of `total` live sessions: the
/// `ceil(q s)`-th smallest (expiry, field) among the `s` live entries of a
/// sample of buckets (all of them up to [`SAMPLE_BUCKETS`]), where `q` is
/// the share to evict. `None` if the sample holds no live entry.
pub(super) async fn place_cutoff<C>(
    conn: &C,
    b: &Buckets,
    now: u64,
    total: u64,
    max: u64,
) -> Result<Option<Cutoff>>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    let sample = sample_buckets(b.count());
    let after = format!("({now}");
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    for chunk in sample.chunks(SAMPLE_PIPELINE) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &bucket in chunk {
            pipe.cmd("ZRANGE")
                .arg(b.zset_key(bucket))
                .arg(&after)
                .arg("+inf")
                .arg("BYSCORE")
                .arg("WITHSCORES");
        }
        let replies: Vec<redis::RedisResult<Vec<Entry>>> =
            pipe.query_async(&mut conn.clone()).await?;
        // A bad bucket is skipped here; the eviction sweep reports it.
        for reply in replies {
            entries.extend(
                counted(reply)?
                    .into_iter()
                    .flatten()
                    .map(|(field, expiry)| (expiry as u64, field)),
            );
        }
    }
    Ok(cutoff_among(entries, total, max))
}

/// The buckets whose entries place the cutoff: all of them up to
/// [`SAMPLE_BUCKETS`], else that many chosen at random without repeats.
pub(super) fn sample_buckets(count: u32) -> Vec<u32> {
    if count <= SAMPLE_BUCKETS {
        return (0..count).collect();
    }
    index::sample(&mut rand::rng(), count as usize, SAMPLE_BUCKETS as usize)
        .into_iter()
        .map(|i| i as u32)
        .collect()
}

/// The `ceil(q s)`-th smallest (expiry, field) of `s` sampled live
/// entries, `q` the share of `total` to evict to keep `max`.
pub(super) fn cutoff_among(
    mut entries: Vec<(u64, Vec<u8>)>,
    total: u64,
    max: u64,
) -> Option<Cutoff> {
    if entries.is_empty() || total <= max {
        return None;
    }
    entries.sort_unstable();
    let share = (total - max) as f64 / total as f64;
    let rank = ((share * entries.len() as f64).ceil() as usize).clamp(1, entries.len());
    let (expiry, field) = entries.swap_remove(rank - 1);
    Some(Cutoff { expiry, field })
}
