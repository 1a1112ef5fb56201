//! Bucket steps: the sweep script's calls over a range of buckets, their
//! replies, and the evictions of out-of-line records they hand back.

use crate::error::{Error, Result};
use crate::scripts::{self, BUCKET_EVICT, BUCKET_SWEEP};
use crate::session::buckets::Buckets;
use crate::session::layout::Bucketed;

/// Buckets swept per pipeline.
pub(super) const PIPELINE: usize = 256;
/// Steps one bucket may take in one sweep of a range. A step removes up to
/// the step limit, so this bounds the work of a pass on a bucket that keeps
/// filling while it is swept.
const MAX_STEPS_PER_BUCKET: u32 = 1024;
/// Bad buckets listed by name in a report (all are counted).
pub(super) const BAD_BUCKETS_LISTED: usize = 16;

/// The session cap's cutoff: entries at or before (expiry, field), in the
/// order a ZSET keeps them, are evicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cutoff {
    pub expiry: u64,
    pub field: Vec<u8>,
}

/// One bucket step's reply.
#[derive(Debug, Default)]
struct Step {
    expired: u64,
    evicted: u64,
    oldest_removed: i64,
    more: bool,
    repaired: u64,
    /// Live entries with out-of-line records, left for `bucket_evict.lua`.
    to_evict: Vec<Vec<u8>>,
    /// Out-of-line fields whose entries the repair removed.
    orphaned: Vec<Vec<u8>>,
}

fn parse_step(value: &redis::Value) -> Result<Step> {
    let parts: Vec<redis::Value> = redis::from_redis_value_ref(value)
        .map_err(|e| Error::Config(format!("unexpected sweep reply: {e}")))?;
    let int = |i: usize| -> i64 {
        parts
            .get(i)
            .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
            .unwrap_or(-1)
    };
    let bytes = |v: &redis::Value| redis::from_redis_value_ref::<Vec<u8>>(v).ok();
    let n_evict = int(5).max(0) as usize;
    let rest = parts.get(6..).unwrap_or_default();
    Ok(Step {
        expired: int(0).max(0) as u64,
        evicted: int(1).max(0) as u64,
        oldest_removed: int(2),
        more: int(3) == 1,
        repaired: int(4).max(0) as u64,
        to_evict: rest.iter().take(n_evict).filter_map(bytes).collect(),
        orphaned: rest.iter().skip(n_evict).filter_map(bytes).collect(),
    })
}

/// A bucket that could not be swept, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BadBucket {
    /// The bucket's number.
    pub bucket: u32,
    /// Redis's error, e.g. `WRONGTYPE ...` for a key another program wrote.
    pub error: String,
}

/// What sweeping a range of buckets did.
#[derive(Clone, Debug, Default)]
pub(super) struct RangeOutcome {
    pub buckets: u64,
    pub reclaimed: u64,
    pub evicted: u64,
    pub repaired: u64,
    pub oldest_removed: Option<u64>,
    pub bad_buckets: u64,
    pub bad: Vec<BadBucket>,
    pub splits: u64,
    pub merges: u64,
}

impl RangeOutcome {
    pub(super) fn bad_bucket(&mut self, bucket: u32, error: String) {
        self.bad_buckets += 1;
        if self.bad.len() < BAD_BUCKETS_LISTED {
            self.bad.push(BadBucket { bucket, error });
        }
    }

    /// A command on one bucket failed. What is the bucket's own (a key of
    /// another type, a value a script cannot read) skips it, reported; the
    /// pass goes on for the rest. What is the connection's (the ACL refused
    /// a command, the server went away) fails the pass: every bucket would
    /// fail the same way, and the operator has something to fix.
    pub(super) fn bucket_failed(&mut self, bucket: u32, e: redis::RedisError) -> Result<()> {
        match Error::from_redis(e, || format!("bucket {bucket}")) {
            e @ (Error::NoPermission(_) | Error::Unavailable(_) | Error::Config(_)) => Err(e),
            e => {
                self.bad_bucket(bucket, e.to_string());
                Ok(())
            }
        }
    }
}

/// One bucket's reply to a command that counts or samples it: `None` for
/// a key of another type, which the sweep or eviction that visits it
/// reports. Any other failure (a refused command, a server gone) fails the
/// call: a cap placed around a bucket it could not count would be wrong.
pub(super) fn counted<T>(reply: redis::RedisResult<T>) -> Result<Option<T>> {
    match reply {
        Ok(v) => Ok(Some(v)),
        Err(e) => match Error::from_redis(e, || "a bucket counted for the cap".to_owned()) {
            Error::WrongType { .. } => Ok(None),
            e => Err(e),
        },
    }
}

/// Sweeps every bucket of `buckets` completely: expired entries, or with
/// `cutoff` every entry at or before it. A bucket whose keys are of another
/// type is skipped and reported; the others are swept.
pub(super) async fn sweep_buckets<C>(
    layout: &Bucketed<C>,
    buckets: impl IntoIterator<Item = u32>,
    step_limit: u32,
    cutoff: Option<&Cutoff>,
) -> Result<RangeOutcome>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let b = layout.buckets();
    let conn = layout.connection();
    let mut out = RangeOutcome::default();
    let mut pending: Vec<(u32, u32)> = buckets.into_iter().map(|bucket| (bucket, 0)).collect();
    out.buckets = pending.len() as u64;
    let (cutoff_expiry, cutoff_field) = match cutoff {
        Some(c) => (c.expiry.to_string(), c.field.clone()),
        None => (String::new(), Vec::new()),
    };
    while !pending.is_empty() {
        let mut again = Vec::new();
        for chunk in pending.chunks(PIPELINE) {
            let invocations: Vec<_> = chunk
                .iter()
                .map(|&(bucket, _)| {
                    let mut inv = BUCKET_SWEEP.prepare_invoke();
                    inv.key(b.hash_key(bucket))
                        .key(b.zset_key(bucket))
                        .arg(step_limit)
                        .arg(&cutoff_expiry)
                        .arg(&cutoff_field);
                    inv
                })
                .collect();
            let replies = scripts::pipelined_each(conn, &invocations, &BUCKET_SWEEP).await?;
            let mut evictions = Vec::new();
            let mut orphans = Vec::new();
            for (&(bucket, steps), reply) in chunk.iter().zip(replies) {
                let step = match reply {
                    Ok(value) => parse_step(&value)?,
                    Err(e) => {
                        out.bucket_failed(bucket, e)?;
                        continue;
                    }
                };
                out.reclaimed += step.expired;
                out.evicted += step.evicted;
                out.repaired += step.repaired;
                if step.oldest_removed >= 0 {
                    let oldest = step.oldest_removed as u64;
                    out.oldest_removed = Some(out.oldest_removed.map_or(oldest, |o| o.min(oldest)));
                }
                orphans.extend(step.orphaned.iter().map(|f| b.out_of_line_key(bucket, f)));
                if !step.to_evict.is_empty() {
                    evictions.push((bucket, step.to_evict));
                }
                if step.more && steps + 1 < MAX_STEPS_PER_BUCKET {
                    again.push((bucket, steps + 1));
                }
            }
            if let (Some(cutoff), false) = (cutoff, evictions.is_empty()) {
                out.evicted += evict_out_of_line(layout, b, cutoff, &evictions, &mut out).await?;
            }
            if !orphans.is_empty() {
                // The records of entries the repair removed: they would
                // expire by themselves; this only reclaims them sooner.
                let _: () = redis::cmd("DEL")
                    .arg(&orphans)
                    .query_async(&mut conn.clone())
                    .await
                    .map_err(Error::from)?;
            }
        }
        pending = again;
    }
    Ok(out)
}

/// Evicts live sessions with out-of-line records, each with its record key
/// in one script call per bucket. Returns how many went.
async fn evict_out_of_line<C>(
    layout: &Bucketed<C>,
    b: &Buckets,
    cutoff: &Cutoff,
    evictions: &[(u32, Vec<Vec<u8>>)],
    out: &mut RangeOutcome,
) -> Result<u64>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let invocations: Vec<_> = evictions
        .iter()
        .map(|(bucket, fields)| {
            let mut inv = BUCKET_EVICT.prepare_invoke();
            inv.key(b.hash_key(*bucket)).key(b.zset_key(*bucket));
            for field in fields {
                inv.key(b.out_of_line_key(*bucket, field));
            }
            inv.arg(cutoff.expiry).arg(&cutoff.field);
            for field in fields {
                inv.arg(field);
            }
            inv
        })
        .collect();
    let replies = scripts::pipelined_each(layout.connection(), &invocations, &BUCKET_EVICT).await?;
    let mut evicted = 0;
    for ((bucket, _), reply) in evictions.iter().zip(replies) {
        match reply.and_then(|v| redis::from_redis_value::<u64>(v).map_err(Into::into)) {
            Ok(n) => evicted += n,
            Err(e) => out.bucket_failed(*bucket, e)?,
        }
    }
    Ok(evicted)
}
