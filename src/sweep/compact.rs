//! Sweeping the compact layout: the index of each group of buckets names
//! the buckets that may hold expired sessions, and one script per group
//! sweeps them and rescores their index entries.

use super::step::RangeOutcome;
use crate::error::{Error, Result};
use crate::layout::Compact;
use crate::scripts::{self, COMPACT_SWEEP};

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
                        out.bad_bucket(scheme.group_buckets(g).start, e.to_string());
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
                    inv.arg(m);
                }
                inv
            })
            .collect();
        let replies = scripts::pipelined_each(conn, &invocations, &COMPACT_SWEEP).await?;
        for (&(g, _), reply) in work.iter().zip(replies) {
            let base = scheme.group_buckets(g).start;
            let parts: Vec<redis::Value> = match reply {
                Ok(value) => redis::from_redis_value(value)
                    .map_err(|e| Error::Config(format!("unexpected sweep reply: {e}")))?,
                Err(e) => {
                    out.bad_bucket(base, e.to_string());
                    continue;
                }
            };
            let int = |i: usize| {
                parts
                    .get(i)
                    .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
                    .unwrap_or(-1)
            };
            out.reclaimed += int(0).max(0) as u64;
            out.buckets += int(2).max(0) as u64;
            if int(1) >= 0 {
                let oldest = int(1) as u64;
                out.oldest_removed = Some(out.oldest_removed.map_or(oldest, |o| o.min(oldest)));
            }
            for member in parts.iter().skip(3) {
                let m: u32 = redis::from_redis_value_ref(member).unwrap_or(0);
                out.bad_bucket(base + m, "WRONGTYPE: a bucket key of another type".into());
            }
        }
    }
    Ok(out)
}
