//! Reclaiming expired sessions from the bucketed layout, bucket by bucket,
//! each bucket in one atomic step on the server; and the session cap.
//!
//! A session touched while its bucket is swept survives: the touch and the
//! sweep step are each one script, so the sweep either sees the new expiry
//! or runs first and the touch finds the session already expired (and
//! gone), as it should. Several sweepers may run at once: the buckets are
//! divided into segments, and a sweeper sweeps a segment only while it
//! holds that segment's lease ([`crate::lock`]) for the interval, so each
//! bucket is swept about once per interval however many sweepers run.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::layout::Bucketed;
use crate::lock;
use crate::scripts::{self, BUCKET_SWEEP};

/// Default time between passes.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of lease segments the buckets are divided into.
pub const DEFAULT_SEGMENTS: u32 = 64;
/// Default most entries one bucket step removes, so one step never holds
/// the server long.
pub const DEFAULT_STEP_LIMIT: u32 = 512;
/// Buckets swept per pipeline.
const PIPELINE: u32 = 256;
/// Buckets whose scores are sampled to place the session cap's cutoff.
const CAP_SAMPLE_BUCKETS: u32 = 4096;

/// How a sweeper works.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SweepConfig {
    /// Time between passes; also each segment lease's length.
    #[serde(with = "secs")]
    pub interval: Duration,
    /// Lease segments (at most the bucket count).
    pub segments: u32,
    /// Most entries one bucket step removes.
    pub step_limit: u32,
    /// Keep at most this many sessions, evicting those least recently
    /// touched first (see [`Sweeper::enforce_cap`]).
    pub max_sessions: Option<u64>,
    /// Make the first pass as soon as the task starts, rather than one
    /// interval later (the default, so a starting app does not sweep at
    /// once).
    pub run_at_start: bool,
}

mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_INTERVAL,
            segments: DEFAULT_SEGMENTS,
            step_limit: DEFAULT_STEP_LIMIT,
            max_sessions: None,
            run_at_start: false,
        }
    }
}

impl SweepConfig {
    /// Sets the interval.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets the number of lease segments.
    pub fn with_segments(mut self, segments: u32) -> Self {
        self.segments = segments.max(1);
        self
    }

    /// Makes the first pass at start.
    pub fn with_run_at_start(mut self, run_at_start: bool) -> Self {
        self.run_at_start = run_at_start;
        self
    }

    /// Sets the session cap.
    pub fn with_max_sessions(mut self, max: u64) -> Self {
        self.max_sessions = Some(max);
        self
    }
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PassReport {
    /// Buckets swept.
    pub buckets: u64,
    /// Segments swept by this sweeper.
    pub segments_swept: u32,
    /// Segments another sweeper held this interval.
    pub segments_skipped: u32,
    /// Expired sessions removed.
    pub reclaimed: u64,
    /// Sessions removed by the cap.
    pub evicted: u64,
    /// How long the oldest expired session found had been expired, in
    /// seconds: how far behind the sweeping is.
    pub lag_secs: u64,
    /// Wall time of the pass.
    pub took: Duration,
}

/// Running totals of a sweeper task.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepStats {
    /// Passes completed.
    pub passes: u64,
    /// Passes that failed (Redis down, say); the task carries on.
    pub failed_passes: u64,
    /// Buckets swept, all passes.
    pub buckets: u64,
    /// Expired sessions removed, all passes.
    pub reclaimed: u64,
    /// Sessions evicted by the cap, all passes.
    pub evicted: u64,
    /// The last pass.
    pub last: Option<PassReport>,
    /// The last error, as text.
    pub last_error: Option<String>,
}

/// One bucket step's reply.
struct Step {
    removed: u64,
    oldest_removed: i64,
    more: bool,
    out_of_line: Vec<Vec<u8>>,
}

fn parse_step(value: redis::Value) -> Result<Step> {
    let parts: Vec<redis::Value> = redis::from_redis_value(value)
        .map_err(|e| Error::Config(format!("unexpected sweep reply: {e}")))?;
    let int = |i: usize| -> i64 {
        parts
            .get(i)
            .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
            .unwrap_or(-1)
    };
    let out_of_line = parts
        .iter()
        .skip(4)
        .filter_map(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
        .collect();
    Ok(Step {
        removed: int(0).max(0) as u64,
        oldest_removed: int(1),
        more: int(3) == 1,
        out_of_line,
    })
}

/// Sweeps a bucketed layout.
#[derive(Clone, Debug)]
pub struct Sweeper<C> {
    layout: Bucketed<C>,
    config: SweepConfig,
}

impl<C> Sweeper<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A sweeper for `layout`, on the layout's connection.
    pub fn new(layout: Bucketed<C>, config: SweepConfig) -> Self {
        Self { layout, config }
    }

    fn conn(&self) -> &C {
        self.layout.connection()
    }

    /// The configuration.
    pub fn config(&self) -> &SweepConfig {
        &self.config
    }

    fn segments(&self) -> u32 {
        self.config.segments.clamp(1, self.layout.buckets().count())
    }

    fn segment_range(&self, segment: u32) -> std::ops::Range<u32> {
        let count = u64::from(self.layout.buckets().count());
        let n = u64::from(self.segments());
        let start = (u64::from(segment) * count / n) as u32;
        let end = (u64::from(segment + 1) * count / n) as u32;
        start..end
    }

    fn lease_key(&self, segment: u32) -> String {
        format!(
            "{}:sweep:{}:{segment}",
            self.layout.buckets().namespace(),
            self.segments()
        )
    }

    /// Sweeps buckets `range` completely (no leases): every expired entry,
    /// or with `cutoff` every entry expiring by then, is removed.
    pub async fn sweep_range(
        &self,
        range: std::ops::Range<u32>,
        cutoff: Option<u64>,
    ) -> Result<PassReport> {
        let started = Instant::now();
        let b = self.layout.buckets();
        let mut report = PassReport::default();
        let now = server_time(self.conn()).await?;
        let mut pending: Vec<u32> = range.collect();
        report.buckets = pending.len() as u64;
        let cutoff_arg = cutoff.map(|c| c.to_string()).unwrap_or_default();
        while !pending.is_empty() {
            let mut again = Vec::new();
            for chunk in pending.chunks(PIPELINE as usize) {
                let invocations: Vec<_> = chunk
                    .iter()
                    .map(|&bucket| {
                        let mut inv = BUCKET_SWEEP.prepare_invoke();
                        inv.key(b.hash_key(bucket))
                            .key(b.zset_key(bucket))
                            .arg(self.config.step_limit)
                            .arg(&cutoff_arg);
                        inv
                    })
                    .collect();
                let replies: Vec<redis::Value> =
                    scripts::pipelined(self.conn(), &self.layout, &[], &invocations, &BUCKET_SWEEP)
                        .await?;
                let mut orphans = Vec::new();
                for (&bucket, reply) in chunk.iter().zip(replies) {
                    let step = parse_step(reply)?;
                    if cutoff.is_some() {
                        report.evicted += step.removed;
                    } else {
                        report.reclaimed += step.removed;
                    }
                    if step.oldest_removed >= 0 && cutoff.is_none() {
                        report.lag_secs = report
                            .lag_secs
                            .max(now.saturating_sub(step.oldest_removed as u64));
                    }
                    for field in step.out_of_line {
                        orphans.push(b.out_of_line_key(bucket, &field));
                    }
                    if step.more {
                        again.push(bucket);
                    }
                }
                // Evicted before their expiry: their out-of-line records
                // would otherwise live on until then.
                for key in orphans {
                    let _: () = redis::cmd("DEL")
                        .arg(&key)
                        .query_async(&mut self.conn().clone())
                        .await?;
                }
            }
            pending = again;
        }
        report.took = started.elapsed();
        Ok(report)
    }

    /// One pass: every segment whose lease this sweeper can take is swept,
    /// starting from a random segment so concurrent sweepers spread out.
    /// Leases last one interval and are not given back, so a segment is
    /// swept once per interval whoever sweeps it.
    pub async fn pass(&self) -> Result<PassReport> {
        let started = Instant::now();
        let segments = self.segments();
        let first = rand::random_range(0..segments);
        let mut total = PassReport::default();
        for i in 0..segments {
            let segment = (first + i) % segments;
            let Some(_lease) =
                lock::try_acquire(self.conn(), &self.lease_key(segment), self.config.interval)
                    .await?
            else {
                total.segments_skipped += 1;
                continue;
            };
            let r = self.sweep_range(self.segment_range(segment), None).await?;
            total.segments_swept += 1;
            total.buckets += r.buckets;
            total.reclaimed += r.reclaimed;
            total.lag_secs = total.lag_secs.max(r.lag_secs);
        }
        if self.config.max_sessions.is_some() {
            total.evicted = self.enforce_cap().await?;
        }
        total.took = started.elapsed();
        Ok(total)
    }

    /// Holds the number of sessions to [`SweepConfig::max_sessions`],
    /// evicting those that expire soonest, which with one TTL for all
    /// sessions are the least recently created or touched.
    ///
    /// The cutoff is placed from the expiries of a random sample of up to
    /// 4,096 buckets (all of them when there are fewer), then every bucket
    /// drops the entries expiring by it. With `s` sampled sessions, `n` in
    /// all and a share `q` to evict, the number kept differs from the cap by
    /// at most about `3 n sqrt(q (1 - q) / s)` (three standard errors of the
    /// sampled quantile), less the sessions sharing the cutoff second (which
    /// are evicted too), plus those created during the pass. With every
    /// bucket sampled the sampling term is zero. Returns how many were
    /// evicted.
    pub async fn enforce_cap(&self) -> Result<u64> {
        let Some(max) = self.config.max_sessions else {
            return Ok(0);
        };
        let b = self.layout.buckets();
        let count = b.count();
        let mut conn = self.conn().clone();
        // Sessions in all buckets.
        let mut total = 0u64;
        for start in (0..count).step_by(4096) {
            let mut pipe = redis::pipe();
            for bucket in start..(start + 4096).min(count) {
                pipe.zcard(b.zset_key(bucket));
            }
            let cards: Vec<u64> = pipe.query_async(&mut conn).await?;
            total += cards.iter().sum::<u64>();
        }
        if total <= max {
            return Ok(0);
        }
        let sample: Vec<u32> = if count <= CAP_SAMPLE_BUCKETS {
            (0..count).collect()
        } else {
            (0..CAP_SAMPLE_BUCKETS)
                .map(|_| rand::random_range(0..count))
                .collect()
        };
        let mut scores: Vec<u64> = Vec::new();
        for chunk in sample.chunks(1024) {
            let mut pipe = redis::pipe();
            for &bucket in chunk {
                pipe.cmd("ZRANGE")
                    .arg(b.zset_key(bucket))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES");
            }
            let replies: Vec<Vec<(Vec<u8>, f64)>> = pipe.query_async(&mut conn).await?;
            scores.extend(replies.into_iter().flatten().map(|(_, s)| s as u64));
        }
        if scores.is_empty() {
            return Ok(0);
        }
        scores.sort_unstable();
        let share = (total - max) as f64 / total as f64;
        // Entries expiring at or before the cutoff go: the ceil(q s)-th
        // smallest sampled expiry. Sessions sharing that second go too, so
        // the cap errs towards keeping fewer, never more.
        let rank = ((share * scores.len() as f64).ceil() as usize).clamp(1, scores.len());
        let cutoff = scores[rank - 1];
        let report = self.sweep_range(0..count, Some(cutoff)).await?;
        Ok(report.evicted)
    }

    /// Starts the sweeper as a background task: a pass every interval (the
    /// first after one interval, or at once with
    /// [`SweepConfig::run_at_start`]), until the handle is dropped or shut
    /// down.
    /// Failed passes are counted and retried next interval, so the task
    /// survives Redis restarts.
    pub fn spawn(self) -> SweeperHandle {
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let (stats_tx, stats_rx) = watch::channel(SweepStats::default());
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(self.config.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            if !self.config.run_at_start {
                ticks.tick().await; // the first tick is immediate: skip it
            }
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stop_rx.changed() => break,
                }
                let outcome = tokio::select! {
                    r = self.pass() => r,
                    _ = stop_rx.changed() => break,
                };
                stats_tx.send_modify(|stats| match outcome {
                    Ok(report) => {
                        stats.passes += 1;
                        stats.buckets += report.buckets;
                        stats.reclaimed += report.reclaimed;
                        stats.evicted += report.evicted;
                        stats.last = Some(report);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "sweep pass failed; retrying next interval");
                        stats.failed_passes += 1;
                        stats.last_error = Some(e.to_string());
                    }
                });
            }
        });
        SweeperHandle {
            stop: stop_tx,
            stats: stats_rx,
            task: Some(task),
        }
    }
}

/// A running sweeper task. Dropping it stops the task.
#[derive(Debug)]
pub struct SweeperHandle {
    stop: watch::Sender<bool>,
    stats: watch::Receiver<SweepStats>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl SweeperHandle {
    /// The totals so far.
    pub fn stats(&self) -> SweepStats {
        self.stats.borrow().clone()
    }

    /// A receiver that sees each pass's totals as they change.
    pub fn subscribe(&self) -> watch::Receiver<SweepStats> {
        self.stats.clone()
    }

    /// Stops the task, waiting for it to end; a pass in progress is
    /// abandoned between bucket steps (each step is atomic on the server).
    pub async fn shutdown(mut self) -> SweepStats {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.stats()
    }
}

impl Drop for SweeperHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn server_time<C>(conn: &C) -> Result<u64>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn.clone()).await?;
    Ok(secs)
}
