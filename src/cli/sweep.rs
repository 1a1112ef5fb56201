//! `sessionpack sweep`: the sweeper as a daemon, printing its counters.

use std::time::Duration;

use clap::Args;

use crate::buckets::DEFAULT_NAMESPACE;
use crate::connect::Endpoint;
use crate::error::{Error, Result};
use crate::meta::StoreMeta;
use crate::sweep::{DEFAULT_SEGMENTS, SweepConfig, SweepTarget, Sweeper};
use crate::{Bucketed, BucketedConfig, Compact, CompactConfig, IdWidth};

/// Arguments of `sessionpack sweep`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("server").required(true).args(["redis_url", "cluster_url"])))]
pub struct SweepArgs {
    /// The store's server.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// A node of the store's Redis Cluster (repeat to name more seeds).
    #[arg(long, value_name = "URL")]
    cluster_url: Vec<String>,
    /// The store's key namespace.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    namespace: String,
    /// The store's bucket bits (log2 of the bucket count); read from the
    /// store's metadata when left out, refused when it disagrees with it.
    #[arg(long)]
    bucket_bits: Option<u8>,
    /// Seconds between passes (and the length of each segment lease).
    #[arg(long, default_value_t = 60.0)]
    interval_secs: f64,
    /// Lease segments the buckets are divided into.
    #[arg(long, default_value_t = DEFAULT_SEGMENTS)]
    segments: u32,
    /// Keep at most this many sessions, evicting the least recently used.
    #[arg(long)]
    max_sessions: Option<u64>,
    /// Stop after this many passes (default: run until interrupted).
    #[arg(long)]
    passes: Option<u64>,
    /// How long one reply from Redis may take, in seconds.
    #[arg(long, default_value_t = crate::connect::DEFAULT_RESPONSE_TIMEOUT.as_secs_f64())]
    response_timeout_secs: f64,
}

pub(super) async fn run(args: SweepArgs) -> Result<()> {
    let endpoint = match &args.redis_url {
        Some(url) => Endpoint::Server(url.clone()),
        None => Endpoint::Cluster(args.cluster_url.clone()),
    };
    let options = crate::ConnectOptions::default().with_response_timeout(Duration::from_secs_f64(
        args.response_timeout_secs.clamp(0.001, 1e6),
    ));
    let conn = endpoint.connect_with(&options).await?;
    // A sweeper never claims a namespace: it sweeps the store an app
    // opened there (whose metadata says how), or nothing.
    let meta = StoreMeta::read(&conn, &args.namespace)
        .await?
        .ok_or_else(|| {
            Error::Config(format!(
                "no store recorded in namespace {:?}: open it from the app first (a sweeper \
                 never creates one)",
                args.namespace
            ))
        })?;
    // Named bits are checked against the store's when the layout opens.
    let bucket_bits = args.bucket_bits.unwrap_or(meta.bucket_bits);
    let width = IdWidth::from_bits(meta.id_bits).unwrap_or_default();
    let (target, buckets): (SweepTarget<_>, u32) = match meta.layout.as_str() {
        "compact" => {
            let mut config = CompactConfig::new(bucket_bits)
                .with_namespace(args.namespace.clone())
                .with_id_width(width);
            config.user_index = meta.user_index();
            config.viewed = meta.viewed();
            let layout = Compact::new(conn, config).await?;
            let count = layout.buckets().count();
            (layout.into(), count)
        }
        "bucketed" => {
            let config = BucketedConfig::new(bucket_bits)
                .with_namespace(args.namespace.clone())
                .with_id_width(width);
            let layout = Bucketed::new(conn, config).await?;
            let count = layout.buckets().count();
            (layout.into(), count)
        }
        other => {
            return Err(Error::Config(format!(
                "namespace {:?} holds a {other:?} store, which the sweeper does not know",
                args.namespace
            )));
        }
    };
    let mut config = SweepConfig::default()
        .with_interval(Duration::from_secs_f64(args.interval_secs.max(0.001)))
        .with_segments(args.segments)
        .with_run_at_start(true);
    config.max_sessions = args.max_sessions;
    println!(
        "sweeping {} buckets of {}{} every {:?} in {} segments{}",
        buckets,
        args.namespace,
        if endpoint.is_cluster() {
            format!(
                " on a cluster of {} primaries",
                endpoint.primaries().await?.len()
            )
        } else {
            String::new()
        },
        config.interval,
        config.segments,
        args.max_sessions
            .map(|m| format!(", capped at {m} sessions"))
            .unwrap_or_default()
    );
    // Registered before the first pass: from then on SIGTERM stops the
    // daemon cleanly (giving its leases back) rather than killing it.
    let mut terminate = Terminate::listen()?;
    let handle = Sweeper::new(target, config).spawn();
    let mut stats = handle.subscribe();
    loop {
        tokio::select! {
            changed = stats.changed() => {
                if changed.is_err() {
                    break;
                }
                let s = stats.borrow_and_update().clone();
                let last = s.last.unwrap_or_default();
                println!(
                    "pass {}: {} buckets in {} segments ({} held by others), {} reclaimed, {} evicted, {} repaired, {} bad buckets{}, lag {}s, {:.1} ms | totals: {} reclaimed, {} evicted, {} failed passes{}",
                    s.passes,
                    last.buckets,
                    last.segments_swept,
                    last.segments_skipped,
                    last.reclaimed,
                    last.evicted,
                    last.repaired,
                    last.bad_buckets,
                    last.bad.first().map(|b| format!(" (bucket {}: {})", b.bucket, b.error)).unwrap_or_default(),
                    last.lag_secs,
                    last.took.as_secs_f64() * 1e3,
                    s.reclaimed,
                    s.evicted,
                    s.failed_passes,
                    s.last_error.map(|e| format!(" (last error: {e})")).unwrap_or_default(),
                );
                if args.passes.is_some_and(|n| s.passes + s.failed_passes >= n) {
                    break;
                }
            }
            _ = tokio::signal::ctrl_c() => {
                println!("interrupted; stopping");
                break;
            }
            _ = terminate.recv() => {
                println!("terminated; stopping");
                break;
            }
        }
    }
    // Waits for the sweeper to give its segment leases back, so a daemon
    // started next sweeps at once.
    handle.shutdown().await;
    Ok(())
}

/// SIGTERM, what service managers send to stop a daemon (never on other
/// platforms).
struct Terminate {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Terminate {
    fn listen() -> Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|e| Error::Config(format!("cannot listen for SIGTERM: {e}")))?,
        })
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    }
}
