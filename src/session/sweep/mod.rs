//! Reclaiming expired sessions from the bucketed layout, bucket by bucket,
//! each bucket in one atomic step on the server; and the session cap.
//!
//! A session touched while its bucket is swept survives: the touch and the
//! sweep step are each one script, so the sweep either sees the new expiry
//! or runs first and the touch finds the session already expired (and
//! gone), as it should. Several sweepers may run at once: the buckets are
//! divided into segments, and a sweeper sweeps a segment only while it
//! holds that segment's lease ([`crate::lock`]) for the interval, so each
//! bucket is swept about once per interval however many sweepers run. A
//! sweeper renews the leases it already holds, so one alone sweeps every
//! segment every pass, and gives them back when it stops, so a sweeper
//! started again (or another) carries on at once.
//!
//! A sweep step also repairs a bucket whose HASH and ZSET disagree (what an
//! `allkeys-*` eviction policy leaves when it evicts one of the two), and a
//! bucket whose keys another program wrote with another type is skipped,
//! changed in nothing, and reported in [`PassReport::bad_buckets`], while
//! the other buckets are swept.

mod background;
mod cap;
mod compact;
mod step;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::lock;
use crate::session::layout::{Bucketed, Compact, Expiry};
pub(crate) use background::InApp;
pub use background::Sweepable;
pub use step::BadBucket;
use step::{RangeOutcome, sweep_buckets};

/// Default number of passes between full passes over a compact store.
pub const DEFAULT_FULL_PASS_EVERY: u32 = 16;
/// Default time between passes.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of lease segments the buckets are divided into.
pub const DEFAULT_SEGMENTS: u32 = 64;
/// Default most entries one bucket step removes, so one step never holds
/// the server long.
pub const DEFAULT_STEP_LIMIT: u32 = 512;

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
    /// touched first, once per pass (see [`Sweeper::enforce_cap`]).
    pub max_sessions: Option<u64>,
    /// Make the first pass as soon as the task starts, rather than one
    /// interval later (the default, so a starting app does not sweep at
    /// once).
    pub run_at_start: bool,
    /// For the compact layout: every this many passes (the first included)
    /// sweep every bucket rather than those its index names, which also
    /// restores index entries that were lost or are stale.
    pub full_pass_every: u32,
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
            full_pass_every: DEFAULT_FULL_PASS_EVERY,
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

/// What one pass (or one sweep of a range, or one enforcement of the cap)
/// did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PassReport {
    /// Buckets swept.
    pub buckets: u64,
    /// Segments swept by this sweeper.
    pub segments_swept: u32,
    /// Segments another sweeper held this interval.
    pub segments_skipped: u32,
    /// Expired sessions removed.
    pub reclaimed: u64,
    /// Live sessions removed by the cap.
    pub evicted: u64,
    /// Entries removed because their bucket's HASH and ZSET disagreed (one
    /// of the two evicted by Redis, or written by another program).
    pub repaired: u64,
    /// Buckets skipped because a key of theirs holds another type; nothing
    /// in them was changed.
    pub bad_buckets: u64,
    /// The first few of those, with Redis's error.
    pub bad: Vec<BadBucket>,
    /// User index entries whose sessions were looked up (compact stores
    /// with a user index, on full passes).
    pub index_checked: u64,
    /// User index entries removed: their sessions were gone.
    pub index_dropped: u64,
    /// Buckets of a growing store split, left full by a write whose own
    /// split failed.
    pub splits: u64,
    /// Pairs of a growing store's buckets merged, their sessions having
    /// fallen.
    pub merges: u64,
    /// The cap was not enforced because another sweeper was enforcing it.
    pub cap_deferred: bool,
    /// Lease keys that hold another program's value of another type; their
    /// segments (or the cap) were worked without a lease. The first few.
    pub lease_errors: Vec<String>,
    /// How long the oldest expired session found had been expired, in
    /// seconds: how far behind the sweeping is.
    pub lag_secs: u64,
    /// Wall time of the pass.
    #[serde(with = "secs")]
    pub took: Duration,
}

impl PassReport {
    fn lease_error(&mut self, key: &str, e: &Error) {
        tracing::warn!(key, error = %e, "unusable lease key; working without a lease");
        if self.lease_errors.len() < step::BAD_BUCKETS_LISTED {
            self.lease_errors.push(format!("{key}: {e}"));
        }
    }

    fn add(&mut self, other: RangeOutcome, now: u64) {
        self.merge(PassReport {
            buckets: other.buckets,
            reclaimed: other.reclaimed,
            evicted: other.evicted,
            repaired: other.repaired,
            bad_buckets: other.bad_buckets,
            bad: other.bad,
            splits: other.splits,
            merges: other.merges,
            lag_secs: other
                .oldest_removed
                .map_or(0, |oldest| now.saturating_sub(oldest)),
            ..PassReport::default()
        });
    }

    fn merge(&mut self, other: PassReport) {
        self.buckets += other.buckets;
        self.reclaimed += other.reclaimed;
        self.evicted += other.evicted;
        self.repaired += other.repaired;
        self.bad_buckets += other.bad_buckets;
        self.index_checked += other.index_checked;
        self.index_dropped += other.index_dropped;
        self.splits += other.splits;
        self.merges += other.merges;
        self.cap_deferred |= other.cap_deferred;
        for e in other.lease_errors {
            if self.lease_errors.len() < step::BAD_BUCKETS_LISTED {
                self.lease_errors.push(e);
            }
        }
        self.lag_secs = self.lag_secs.max(other.lag_secs);
        for bad in other.bad {
            if self.bad.len() < step::BAD_BUCKETS_LISTED {
                self.bad.push(bad);
            }
        }
    }
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
    /// Entries removed by repairs, all passes.
    pub repaired: u64,
    /// Bucket sweeps skipped for keys of another type, all passes.
    pub bad_buckets: u64,
    /// User index entries removed, all passes.
    pub index_dropped: u64,
    /// The last pass.
    pub last: Option<PassReport>,
    /// The last error, as text.
    pub last_error: Option<String>,
}

/// What a sweeper sweeps.
#[derive(Clone, Debug)]
pub enum SweepTarget<C> {
    /// A bucketed store: every bucket, each pass.
    Bucketed(Bucketed<C>),
    /// A compact store: the buckets its index names, and every bucket each
    /// [`SweepConfig::full_pass_every`] passes.
    Compact(Compact<C>),
}

impl<C> From<Bucketed<C>> for SweepTarget<C> {
    fn from(layout: Bucketed<C>) -> Self {
        Self::Bucketed(layout)
    }
}

impl<C> From<Compact<C>> for SweepTarget<C> {
    fn from(layout: Compact<C>) -> Self {
        Self::Compact(layout)
    }
}

/// Sweeps a bucketed or compact layout.
#[derive(Clone, Debug)]
pub struct Sweeper<C> {
    target: SweepTarget<C>,
    config: SweepConfig,
    /// This sweeper's lease holder token: it renews its own leases.
    token: Arc<str>,
    /// Passes made, shared by clones: decides the compact layout's full
    /// passes.
    passes: Arc<std::sync::atomic::AtomicU64>,
    /// The segment leases this sweeper (or a clone) holds, by segment, so a
    /// sweeper that stops can give them back.
    held: Arc<std::sync::Mutex<BTreeMap<u32, lock::Lease<C>>>>,
}

impl<C> Sweeper<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A sweeper for `layout` ([`Bucketed`] or [`Compact`]), on the
    /// layout's connection. Open the layout with its `new`, which checks the
    /// store's recorded bucket bits: a sweeper with other bits would sweep
    /// other keys.
    pub fn new(layout: impl Into<SweepTarget<C>>, config: SweepConfig) -> Self {
        let token = format!("{:032x}", rand::random::<u128>());
        Self {
            target: layout.into(),
            config,
            token: token.into(),
            passes: Arc::default(),
            held: Arc::default(),
        }
    }

    fn conn(&self) -> &C {
        match &self.target {
            SweepTarget::Bucketed(l) => l.connection(),
            SweepTarget::Compact(l) => l.connection(),
        }
    }

    fn namespace(&self) -> &str {
        match &self.target {
            SweepTarget::Bucketed(l) => l.buckets().namespace(),
            SweepTarget::Compact(l) => l.buckets().namespace(),
        }
    }

    /// What segments divide and ranges name: buckets, or for the compact
    /// layout groups of buckets (one index each).
    pub fn units(&self) -> u32 {
        match &self.target {
            SweepTarget::Bucketed(l) => l.buckets().count(),
            SweepTarget::Compact(l) => match l.shape() {
                Some(shape) => shape.group_count(),
                None => l.scheme().groups(),
            },
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SweepConfig {
        &self.config
    }

    fn segments(&self) -> u32 {
        self.config.segments.clamp(1, self.units())
    }

    fn segment_range(&self, segment: u32) -> std::ops::Range<u32> {
        let count = u64::from(self.units());
        let n = u64::from(self.segments());
        let start = (u64::from(segment) * count / n) as u32;
        let end = (u64::from(segment + 1) * count / n) as u32;
        start..end
    }

    fn lease_key(&self, segment: u32) -> String {
        format!("{}:sweep:{}:{segment}", self.namespace(), self.segments())
    }

    fn cap_lease_key(&self) -> String {
        format!("{}:sweep:cap", self.namespace())
    }

    /// Sweeps `range` of [`Sweeper::units`] (no leases). Bucketed: every
    /// expired entry is removed, and every bucket whose HASH and ZSET
    /// disagree repaired. Compact: the buckets each group's index names
    /// as due.
    pub async fn sweep_range(&self, range: std::ops::Range<u32>) -> Result<PassReport> {
        self.sweep(range, false).await
    }

    /// Sweeps `range` of [`Sweeper::units`] visiting every bucket, whatever
    /// an index says (for the bucketed layout, the same as
    /// [`Sweeper::sweep_range`]).
    pub async fn sweep_range_full(&self, range: std::ops::Range<u32>) -> Result<PassReport> {
        self.sweep(range, true).await
    }

    async fn sweep(&self, range: std::ops::Range<u32>, full: bool) -> Result<PassReport> {
        let started = Instant::now();
        let now = server_time(self.conn()).await?;
        // The user index first: an entry whose session has expired then
        // finds it there and reclaims it, where after the buckets' sweep
        // it would find nothing and leave a tombstone.
        let mut report = PassReport::default();
        if let SweepTarget::Compact(l) = &self.target
            && full
        {
            let swept = l
                .sweep_user_buckets(self.user_buckets(l, range.clone()), now)
                .await?;
            report.index_checked = swept.checked;
            report.index_dropped = swept.dropped;
            report.reclaimed = swept.reclaimed;
            report.bad_buckets = swept.bad;
        }
        let outcome = match &self.target {
            SweepTarget::Bucketed(l) => {
                sweep_buckets(l, range, self.config.step_limit, None).await?
            }
            // The server expires the fields itself: nothing in the buckets
            // is left for a sweep (only the user index, above).
            SweepTarget::Compact(l) if l.expiry() == Expiry::Server => Default::default(),
            SweepTarget::Compact(l) => compact::sweep_groups(l, range, now, full).await?,
        };
        report.add(outcome, now);
        report.took = started.elapsed();
        Ok(report)
    }

    /// The user index buckets swept with `groups` of a compact store: the
    /// same share of them, so a pass over every group covers each once.
    fn user_buckets(&self, l: &Compact<C>, groups: std::ops::Range<u32>) -> std::ops::Range<u32> {
        let Some(users) = l.user_index() else {
            return 0..0;
        };
        let (n, g) = (u64::from(users.count()), u64::from(self.units()));
        let at = |unit: u32| (u64::from(unit) * n / g) as u32;
        at(groups.start)..at(groups.end)
    }

    /// One pass: every segment whose lease this sweeper can take (or
    /// renew) is swept, starting from a random segment so concurrent
    /// sweepers spread out; then the cap, if one is set. Leases last one
    /// interval and are not given back between passes, so a segment is
    /// swept once per interval whoever sweeps it; a sweeper that stops
    /// gives them back ([`Sweeper::release_leases`]).
    pub async fn pass(&self) -> Result<PassReport> {
        let pass = self.pass_unobserved().await;
        crate::metrics::sweep_pass(match &pass {
            Ok(r) => Ok(crate::metrics::Swept {
                buckets: r.buckets,
                reclaimed: r.reclaimed,
                evicted: r.evicted,
                repaired: r.repaired,
                bad_buckets: r.bad_buckets,
                index_repaired: r.index_dropped,
                lag_secs: r.lag_secs,
                took: r.took,
            }),
            Err(e) => Err(e.kind()),
        });
        pass
    }

    async fn pass_unobserved(&self) -> Result<PassReport> {
        let started = Instant::now();
        if let SweepTarget::Compact(l) = &self.target {
            l.record_again_if_gone().await?;
        }
        let segments = self.segments();
        let first = rand::random_range(0..segments);
        let every = u64::from(self.config.full_pass_every.max(1));
        let full = self
            .passes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(every);
        let mut total = PassReport::default();
        for i in 0..segments {
            let segment = (first + i) % segments;
            let key = self.lease_key(segment);
            match lock::try_claim(self.conn(), &key, &self.token, self.config.interval).await {
                Ok(Some(lease)) => {
                    self.held_leases().insert(segment, lease);
                }
                Ok(None) => {
                    total.segments_skipped += 1;
                    continue;
                }
                // Another program's key where the lease should be: no
                // sweeper could ever hold it, so the segment is swept
                // without one (a second sweep of it is harmless).
                Err(e @ Error::WrongType { .. }) => total.lease_error(&key, &e),
                Err(e) => return Err(e),
            }
            let r = self.sweep(self.segment_range(segment), full).await?;
            total.segments_swept += 1;
            total.merge(r);
        }
        if self.config.max_sessions.is_some() {
            let cap = self.enforce_cap().await?;
            total.merge(PassReport { buckets: 0, ..cap });
        }
        total.took = started.elapsed();
        Ok(total)
    }

    fn held_leases(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, lock::Lease<C>>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives back the segment leases this sweeper holds, so another sweeper
    /// (or this one, started again) sweeps those segments at once rather
    /// than after an interval. Returns how many were still its own; on an
    /// error (Redis gone) the rest run out after one interval. A
    /// spawned sweeper does this when it stops ([`SweeperHandle::shutdown`],
    /// or its handle dropped while the runtime runs); one driven by
    /// [`Sweeper::pass`] calls it when done.
    pub async fn release_leases(&self) -> Result<u32> {
        let leases = std::mem::take(&mut *self.held_leases());
        let mut released = 0;
        for lease in leases.into_values() {
            // On an error the rest are left to run out after one interval:
            // a stopping sweeper does not wait out a timeout per segment.
            if lease.release().await? {
                released += 1;
            }
        }
        Ok(released)
    }

    /// Holds the number of live sessions to [`SweepConfig::max_sessions`],
    /// evicting those that expire soonest, which with one TTL for all
    /// sessions are the least recently created or touched.
    ///
    /// One sweeper at a time enforces the cap (it holds a lease on it while
    /// it counts and evicts; another finds it held and reports
    /// [`PassReport::cap_deferred`]), so sweepers never evict on counts
    /// another's eviction has made stale. It counts the live sessions, places
    /// a cutoff in (expiry, field) order from the live entries of a random
    /// sample of up to 4,096 buckets (all of them when there are fewer), and
    /// every bucket drops the entries at or before it. Sessions sharing an
    /// expiry second are split at a field, not evicted together. With `s`
    /// sampled sessions, `n` live in all and a share `q` to evict, the number
    /// kept differs from the cap by at most about `3 n sqrt(q (1 - q) / s)`
    /// (three standard errors of the sampled quantile), plus those created
    /// or touched past the cutoff during the enforcement (and in a growing
    /// store those in buckets split or merged during it, which the next
    /// enforcement reaches); with every bucket sampled the sampling term is
    /// zero, and the cap is exact. A growing store's cutoff is in (expiry,
    /// id) order, its buckets' fields being of several lengths.
    pub async fn enforce_cap(&self) -> Result<PassReport> {
        let started = Instant::now();
        let mut report = PassReport::default();
        let Some(max) = self.config.max_sessions else {
            return Ok(report);
        };
        let key = self.cap_lease_key();
        let lease =
            match lock::try_claim(self.conn(), &key, &self.token, self.config.interval).await {
                Ok(Some(lease)) => Some(lease),
                Ok(None) => {
                    report.cap_deferred = true;
                    return Ok(report);
                }
                // Unusable lease key: the cap is enforced without one rather
                // than never.
                Err(e @ Error::WrongType { .. }) => {
                    report.lease_error(&key, &e);
                    None
                }
                Err(e) => return Err(e),
            };
        let outcome = self.cap_under_lease(max, &mut report).await;
        // Released whatever happened, so the next pass (any sweeper's) may
        // enforce it; a lease lost to a crash runs out after one interval.
        if let Some(lease) = lease {
            lease.release().await?;
        }
        outcome?;
        report.took = started.elapsed();
        Ok(report)
    }

    async fn cap_under_lease(&self, max: u64, report: &mut PassReport) -> Result<()> {
        let now = server_time(self.conn()).await?;
        let outcome = match &self.target {
            SweepTarget::Bucketed(layout) => {
                let b = layout.buckets();
                let total = cap::count_live(self.conn(), b, now).await?;
                if total <= max {
                    return Ok(());
                }
                let Some(cutoff) = cap::place_cutoff(self.conn(), b, now, total, max).await? else {
                    return Ok(());
                };
                let step = self.config.step_limit;
                sweep_buckets(layout, 0..b.count(), step, Some(&cutoff)).await?
            }
            SweepTarget::Compact(layout) => {
                let total = compact::count_sessions(layout).await?;
                if total <= max {
                    return Ok(());
                }
                let Some(cutoff) = compact::place_cutoff(layout, now, total, max).await? else {
                    return Ok(());
                };
                compact::evict(layout, &cutoff).await?
            }
        };
        report.add(outcome, now);
        Ok(())
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
                        if report.bad_buckets > 0 {
                            tracing::warn!(
                                bad_buckets = report.bad_buckets,
                                first = ?report.bad.first(),
                                "buckets skipped: a key of theirs holds another type"
                            );
                        }
                        stats.passes += 1;
                        stats.buckets += report.buckets;
                        stats.reclaimed += report.reclaimed;
                        stats.evicted += report.evicted;
                        stats.repaired += report.repaired;
                        stats.bad_buckets += report.bad_buckets;
                        stats.index_dropped += report.index_dropped;
                        stats.last = Some(report);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "sweep pass failed; retrying next interval");
                        stats.failed_passes += 1;
                        stats.last_error = Some(e.to_string());
                    }
                });
            }
            if let Err(e) = self.release_leases().await {
                tracing::warn!(error = %e, "giving back segment leases failed; they run out after one interval");
            }
        });
        SweeperHandle {
            stop: stop_tx,
            stats: stats_rx,
            task: Some(task),
        }
    }
}

/// A running sweeper task. Dropping it stops the task, which then gives
/// back its segment leases (if the runtime still runs; if not, they run out
/// after one interval).
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

    /// Stops the task, waiting for it to end and give back its segment
    /// leases; a pass in progress is abandoned between bucket steps (each
    /// step is atomic on the server).
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
