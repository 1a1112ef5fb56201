//! `sessionpack sweep`: the sweeper as a daemon, printing its counters.

use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use std::time::Duration;

use clap::Args;

use super::store_args::StoreArgs;
use sessionpack::error::{Error, Result};
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack::session::layout::Expiry;
use sessionpack::session::sweep::{DEFAULT_SEGMENTS, SweepConfig, SweepTarget, Sweeper};
use sessionpack::{Compact, CompactConfig, IdWidth};

/// Arguments of `sessionpack sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    store: StoreArgs,
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
}

pub(super) async fn run(args: SweepArgs) -> Result<()> {
    // A sweeper never claims a namespace: it sweeps the store an app
    // opened there (whose metadata says how), or nothing.
    let (conn, meta) = args.store.open().await?;
    let namespace = &args.store.namespace;
    // Named bits are checked against the store's when the layout opens.
    let bucket_bits = args.bucket_bits.unwrap_or(meta.bucket_bits);
    let width = IdWidth::from_bits(meta.id_bits).unwrap_or_default();
    let (target, buckets): (SweepTarget<_>, u32) = match meta.layout.as_str() {
        "compact" => {
            let mut config = CompactConfig::new(bucket_bits)
                .with_namespace(namespace.clone())
                .with_id_width(width);
            config.user_index = UserIndexConfig::from_meta(&meta);
            config.viewed = ViewedConfig::from_meta(&meta);
            config.expiry = Expiry::from_meta(&meta);
            config.growing = Some(meta.growing);
            let layout = Compact::new(conn, config).await?;
            let count = layout.buckets().count();
            (layout.into(), count)
        }
        "bucketed" => {
            let config = BucketedConfig::new(bucket_bits)
                .with_namespace(namespace.clone())
                .with_id_width(width);
            let layout = Bucketed::new(conn, config).await?;
            let count = layout.buckets().count();
            (layout.into(), count)
        }
        other => {
            return Err(Error::Config(format!(
                "namespace {:?} holds a {other:?} store, which the sweeper does not know",
                namespace
            )));
        }
    };
    let mut config = SweepConfig::default()
        .with_interval(Duration::from_secs_f64(args.interval_secs.max(0.001)))
        .with_segments(args.segments)
        .with_run_at_start(true);
    config.max_sessions = args.max_sessions;
    let what = if meta.growing {
        format!("the {buckets} groups of a growing store")
    } else {
        format!("{buckets} buckets")
    };
    println!(
        "sweeping {} of {}{} every {:?} in {} segments{}",
        what,
        namespace,
        if args.store.endpoint().is_cluster() {
            format!(
                " on a cluster of {} primaries",
                args.store
                    .endpoint()
                    .primaries(&args.store.options()?)
                    .await?
                    .len()
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
    let mut totals = None;
    loop {
        tokio::select! {
            changed = stats.changed() => {
                if changed.is_err() {
                    break;
                }
                let s = stats.borrow_and_update().clone();
                let last = s.last.clone().unwrap_or_default();
                println!(
                    "pass {}: {} buckets in {} segments ({} held by others), {} reclaimed, {} evicted, {} repaired, {} bad buckets{}{}, lag {}s, {:.1} ms | totals: {} reclaimed, {} evicted, {} failed passes{}",
                    s.passes,
                    last.buckets,
                    last.segments_swept,
                    last.segments_skipped,
                    last.reclaimed,
                    last.evicted,
                    last.repaired,
                    last.bad_buckets,
                    last.bad.first().map(|b| format!(" (bucket {}: {})", b.bucket, b.error)).unwrap_or_default(),
                    if meta.growing {
                        format!(", {} merged, {} split", last.merges, last.splits)
                    } else {
                        String::new()
                    },
                    last.lag_secs,
                    last.took.as_secs_f64() * 1e3,
                    s.reclaimed,
                    s.evicted,
                    s.failed_passes,
                    s.last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default(),
                );
                let done = args.passes.is_some_and(|n| s.passes + s.failed_passes >= n);
                totals = Some(s);
                if done {
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
    match totals {
        // A run of counted passes is a job (cron's, a script's): it fails
        // where any pass failed or left buckets unswept.
        Some(s) if args.passes.is_some() => passes_outcome(&s),
        _ => Ok(()),
    }
}

/// The outcome of a run of counted passes: an error naming what to fix if
/// any pass failed, or any bucket was skipped.
fn passes_outcome(s: &sessionpack::session::sweep::SweepStats) -> Result<()> {
    if s.failed_passes > 0 {
        return Err(Error::Config(format!(
            "{} of {} sweep passes failed; the last: {}",
            s.failed_passes,
            s.passes + s.failed_passes,
            s.last_error.as_deref().unwrap_or("unknown")
        )));
    }
    if s.bad_buckets > 0 {
        let first = s
            .last
            .as_ref()
            .and_then(|r| r.bad.first())
            .map(|b| format!(" (bucket {}: {})", b.bucket, b.error))
            .unwrap_or_default();
        return Err(Error::Config(format!(
            "{} buckets could not be swept: a key of theirs holds another type or an \
             unreadable value{first}",
            s.bad_buckets
        )));
    }
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
