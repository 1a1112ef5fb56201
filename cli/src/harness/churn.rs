//! The churn benchmark: what a store costs once sessions have come and
//! gone for a while, not just after a bulk load.
//!
//! Half the sessions live long; the other half are replaced each round:
//! they expire, the sweeper reclaims them, and as many new ones are
//! created. Memory is sampled at the full population after the load and
//! after each round, then after `MEMORY PURGE` (jemalloc hands dirty pages
//! back) and, where the server supports it, after 20 s of active
//! defragmentation with its thresholds lowered (1 MB, 1%).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::info::{MemorySample, info};
use crate::baselines::{AnyLayout, LayoutKind};
use sessionpack::error::{Error, Result};
use sessionpack::session::layout::Layout;
use sessionpack::session::store::Store;
use sessionpack::session::sweep::{SweepConfig, SweepTarget, Sweeper};

/// One moment's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChurnPoint {
    /// What had just happened.
    pub moment: String,
    /// Sessions held.
    pub sessions: u64,
    /// `used_memory` delta over the empty store, per session.
    pub bytes_per_session: f64,
    /// `used_memory_rss` delta over the empty store, per session.
    pub rss_per_session: f64,
    /// The raw figures.
    pub sample: MemorySample,
}

/// A whole churn run of one layout.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChurnRun {
    /// The layout and its bucket bits.
    pub label: String,
    /// Sessions at full population.
    pub sessions: u64,
    /// The empty store's figures.
    pub empty: MemorySample,
    /// The samples, in order.
    pub points: Vec<ChurnPoint>,
}

/// Loads `sessions` sessions into `layout` (a bucketed or compact one),
/// then churns half of them `rounds` times, sampling at each step.
pub async fn run<C>(
    conn: &mut C,
    layout: AnyLayout<C>,
    label: String,
    sessions: u64,
    rounds: u32,
) -> Result<ChurnRun>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let target: SweepTarget<C> = match &layout {
        AnyLayout::Bucketed(l) => l.clone().into(),
        AnyLayout::Compact(l) => l.clone().into(),
        _ => {
            return Err(Error::Config(
                "churn needs a layout with a sweeper (bucketed, compact)".into(),
            ));
        }
    };
    let sweeper = Sweeper::new(target, SweepConfig::default());
    let empty = MemorySample::read(conn).await?;
    let half = sessions / 2;
    let batch: Vec<(u64, ())> = (0..1000).map(|i| (1 << 20 | i, ())).collect();
    let long: Store<&AnyLayout<C>, ()> = Store::new(&layout)
        .without_sweeper()
        .with_ttl(Duration::from_secs(24 * 3600));
    let started = Instant::now();
    create(&long, &batch, half).await?;
    // The churned half must outlive its own creation, which takes about as
    // long as the long half's did.
    let ttl = Duration::from_secs(2 * started.elapsed().as_secs() + 3);
    let short = Store::<&AnyLayout<C>, ()>::new(&layout).with_ttl(ttl);
    create(&short, &batch, sessions - half).await?;
    let mut points = vec![sample(conn, &empty, "after the load", sessions).await?];
    for round in 1..=rounds {
        // Lifetimes count from the next whole second: up to 1 s more.
        tokio::time::sleep(ttl + Duration::from_millis(1200)).await;
        let swept = sweeper.sweep_range_full(0..sweeper.units()).await?;
        if swept.reclaimed < sessions - half {
            return Err(Error::Config(format!(
                "round {round}: {} of {} expired sessions reclaimed",
                swept.reclaimed,
                sessions - half
            )));
        }
        create(&short, &batch, sessions - half).await?;
        let moment = format!("after churn round {round}");
        points.push(sample(conn, &empty, &moment, sessions).await?);
    }
    let _: redis::RedisResult<()> = redis::cmd("MEMORY").arg("PURGE").query_async(conn).await;
    points.push(sample(conn, &empty, "then MEMORY PURGE", sessions).await?);
    // Defragmentation starts only past 100 MB and 10% of waste by
    // default; a store of this size is measured with both thresholds low.
    let defrag: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("activedefrag")
        .arg("yes")
        .arg("active-defrag-ignore-bytes")
        .arg("1mb")
        .arg("active-defrag-threshold-lower")
        .arg("1")
        .query_async(conn)
        .await;
    match defrag {
        Ok(()) => {
            tokio::time::sleep(Duration::from_secs(20)).await;
            let moment = "then activedefrag for 20 s";
            points.push(sample(conn, &empty, moment, sessions).await?);
        }
        Err(e) => {
            let allocator = info(conn, "memory")
                .await?
                .get("mem_allocator")
                .cloned()
                .unwrap_or_default();
            println!(
                "activedefrag skipped: this server ({allocator}) refuses it: {e} (Debian's \
                 redis-server uses the system jemalloc, which lacks what it needs)"
            );
        }
    }
    Ok(ChurnRun {
        label,
        sessions,
        empty,
        points,
    })
}

async fn create<L: Layout>(store: &Store<L, ()>, batch: &[(u64, ())], n: u64) -> Result<()> {
    let mut made = 0;
    while made < n {
        let take = (n - made).min(batch.len() as u64) as usize;
        store.create_many(&batch[..take]).await?;
        made += take as u64;
    }
    Ok(())
}

async fn sample<C>(
    conn: &mut C,
    empty: &MemorySample,
    moment: &str,
    sessions: u64,
) -> Result<ChurnPoint>
where
    C: redis::aio::ConnectionLike + Send,
{
    let sample = MemorySample::read(conn).await?;
    // Signed: RSS can fall below the empty server's (memory it held from
    // before was given back), and then says so rather than 0.
    let per = |now: u64, then: u64| (now as f64 - then as f64) / sessions.max(1) as f64;
    Ok(ChurnPoint {
        moment: moment.to_owned(),
        sessions,
        bytes_per_session: per(sample.used_memory, empty.used_memory),
        rss_per_session: per(sample.used_memory_rss, empty.used_memory_rss),
        sample,
    })
}

/// The layouts the churn benchmark measures by default.
pub const LAYOUTS: [LayoutKind; 2] = [LayoutKind::Compact, LayoutKind::Bucketed];
