//! `sessionpack bench throughput`: sessions per second per layout and
//! operation, as ratios to `redis-benchmark` and to packed-setex, with
//! server CPU per operation (per primary on a cluster) and, optionally,
//! what waiting for replicas costs.

use super::target::Connected;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::baselines::LayoutKind;
use crate::harness::info::{ServerInfo, info};
use crate::harness::nodes::Nodes;
use crate::harness::throughput::{self, BATCH, SetBaseline, Spread, ThroughputReport};
use crate::profile::Profile;
use sessionpack::conn::wait::WaitForReplicas;
use sessionpack::error::{Error, Result};
use sessionpack::session::layout::compact::DEFAULT_GROWING_BITS;
use sessionpack::session::store::Store;
use sessionpack::{IdWidth, json_map};

/// Arguments of `sessionpack bench throughput`.
#[derive(Debug, Args)]
pub struct ThroughputArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions per operation and layout.
    #[arg(long, default_value_t = 100_000)]
    sessions: usize,
    /// Concurrent callers for the one-at-a-time operations.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Rounds; each measures every layout in turn, and the median of each
    /// figure is reported, so a burst of noise on a shared machine hits
    /// every layout alike.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Layouts to measure (default: all).
    #[arg(long, value_delimiter = ',', value_parser = super::layout_kind())]
    layouts: Vec<LayoutKind>,
    /// Bucket counts (log2) to measure the compact layout at, to see what
    /// fuller buckets cost (default: the advisor's pick).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=24))]
    compact_bits: Vec<u8>,
    /// Also measure every layout with each write followed by `WAIT` for
    /// this many replicas (a server with replicas, or `--cluster N
    /// --replicas M`), to see what writes that survive a failover cost.
    #[arg(long, value_name = "REPLICAS", value_parser = clap::value_parser!(u32).range(1..=8))]
    wait_replicas: Option<u32>,
    /// Also measure the compact layout with a user index (as many index
    /// buckets as session buckets), to see what it adds to each
    /// operation.
    #[arg(long)]
    user_index: bool,
    /// Also measure the compact layout as a growing store
    /// (`CompactConfig::growing()`: 16 buckets at first, split as the
    /// run fills them), to see what routing and splits add.
    #[arg(long)]
    growing: bool,
    /// Sessions carry this profile's data as typed attributes (a map,
    /// MessagePack-encoded by the store; `bench tower` lists the
    /// profiles). Default: identity-only sessions, with no attributes.
    #[arg(long)]
    profile: Option<Profile>,
    /// Directory for throughput.json and throughput.md.
    #[arg(long, default_value = "results/throughput")]
    out: PathBuf,
}

/// How long a benchmark write waits for its replicas before it is
/// reported as not replicated (and the run fails).
const WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) async fn run(args: ThroughputArgs) -> Result<()> {
    let target = args.target.connect().await?;
    target.flush().await?;
    let first = &target.primaries[0];
    let port: u16 = first
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .ok_or_else(|| Error::Config(format!("cannot find a port in {first}")))?;
    let mut nodes = Nodes::connect(&target.primaries, &target.options).await?;
    let server = ServerInfo::read(&mut target.open(first).await?).await?;
    if let Some(n) = args.wait_replicas {
        check_replicas(&target, n).await?;
    }
    let conn = target.conn().await?;
    let cluster = target.is_cluster();
    let layouts = if args.layouts.is_empty() && cluster {
        println!("book-login-hash is not measured: the book's design cannot run on a cluster");
        LayoutKind::ALL
            .into_iter()
            .filter(|&l| l != LayoutKind::BookLoginHash)
            .collect()
    } else if args.layouts.is_empty() {
        LayoutKind::ALL.to_vec()
    } else {
        args.layouts.clone()
    };
    if cluster && layouts.contains(&LayoutKind::BookLoginHash) {
        return Err(Error::Config(
            "book-login-hash cannot run on a cluster (its scripts name keys of two slots); pass --layouts without it".into(),
        ));
    }
    let requests = (args.sessions as u64).max(10_000);
    // Each layout holds 2 x sessions at the end (batch + single creates).
    let bits = advisor::recommend_bits(
        2 * args.sessions as u64,
        &server.limits,
        DEFAULT_MAX_CONVERTED,
    );
    let compact_bits = match args.profile {
        None => advisor::recommend_compact_bits(
            2 * args.sessions as u64,
            &server.limits,
            DEFAULT_MAX_CONVERTED,
        ),
        // Records of this size: as the advisor sizes a tower store's
        // buckets, with each session's pieces counted against the limit.
        Some(profile) => {
            let sizes = (0..1000u64)
                .map(|n| json_map::encode(&profile.data(n)).map(|b| b.len() as u64))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            advisor::recommend_tower_bits(
                2 * args.sessions as u64,
                &server.limits,
                DEFAULT_MAX_CONVERTED,
                sizes.iter().sum::<u64>() / sizes.len() as u64,
                IdWidth::default().bytes() as u64,
            )
        }
    };
    let mut all_rates = Vec::new();
    let mut spread = Vec::new();
    let (mut singles, mut pipelined) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        nodes.flush().await?;
        singles.push(throughput::redis_benchmark_set(
            port,
            cluster,
            args.clients,
            1,
            requests,
        )?);
        pipelined.push(throughput::redis_benchmark_set(
            port,
            cluster,
            2,
            BATCH,
            requests * 4,
        )?);
        let compact_runs = if args.compact_bits.is_empty() {
            vec![compact_bits]
        } else {
            args.compact_bits.clone()
        };
        let indexed = std::iter::once(false).chain(args.user_index.then_some(true));
        let indexed: Vec<bool> = indexed.collect();
        let plain = |layout, bits, users| Run {
            layout,
            bits,
            users,
            growing: false,
        };
        let runs: Vec<Run> = layouts
            .iter()
            .flat_map(|&layout| match layout {
                LayoutKind::Compact => compact_runs
                    .iter()
                    .flat_map(|&b| indexed.iter().map(move |&i| plain(layout, b, i)))
                    .chain(args.growing.then_some(Run {
                        layout,
                        bits: DEFAULT_GROWING_BITS,
                        users: false,
                        growing: true,
                    }))
                    .collect::<Vec<_>>(),
                LayoutKind::CompactServerExpiry => compact_runs
                    .iter()
                    .map(|&b| plain(layout, b, false))
                    .collect(),
                _ => vec![plain(layout, bits, false)],
            })
            .collect();
        let waits = std::iter::once(None).chain(args.wait_replicas.map(Some));
        let runs: Vec<(Run, Option<u32>)> = waits
            .flat_map(|w| runs.iter().map(move |&r| (r, w)))
            .collect();
        spread.clear();
        for &(how, wait) in &runs {
            let Run {
                layout,
                bits,
                users,
                growing,
            } = how;
            // Only what this run wrote is there: the target was checked above.
            nodes.flush().await?;
            let empty = nodes.samples().await?;
            let mut label = if growing {
                format!("{layout} growing")
            } else if layout.is_bucketed() {
                format!("{layout} 2^{bits}")
            } else {
                layout.name().to_owned()
            };
            if users {
                label += " + user index";
            }
            let measured = match wait {
                None => measure(conn.clone(), how, &label, &args, &mut nodes).await?,
                Some(n) => {
                    let waiting = WaitForReplicas::new(conn.clone(), n, WAIT_TIMEOUT);
                    let label = throughput::wait_label(&label, n);
                    measure(waiting, how, &label, &args, &mut nodes).await?
                }
            };
            for r in &measured {
                println!(
                    "round {round}: {:32} {:16} {:>9.0}/s",
                    r.layout,
                    r.op.name(),
                    r.ops_per_sec
                );
            }
            all_rates.extend(measured);
            if wait.is_none() {
                let samples = nodes.samples().await?;
                spread.push(Spread {
                    layout: label,
                    keys: samples.iter().map(|s| s.keys).collect(),
                    used_memory: samples
                        .iter()
                        .zip(&empty)
                        .map(|(s, e)| s.used_memory.saturating_sub(e.used_memory))
                        .collect(),
                });
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let set_baseline = SetBaseline {
        single: median(singles),
        pipelined: median(pipelined),
    };
    let report = ThroughputReport {
        command: super::bench_memory::command_line(),
        redis_version: server.name(),
        clients: args.clients,
        sessions: args.sessions,
        set_baseline,
        rounds: args.rounds as usize,
        rates: throughput::medians(&all_rates),
        all_rates,
        layouts,
        primaries: if cluster {
            target.primaries.clone()
        } else {
            Vec::new()
        },
        spread: if cluster { spread } else { Vec::new() },
        wait_replicas: args.wait_replicas,
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| Error::Config(e.to_string()))?;
    let on = if cluster {
        format!(
            "a cluster of {} primaries, redis-benchmark with `--cluster`",
            report.primaries.len()
        )
    } else {
        "one server".to_owned()
    };
    let md = format!(
        "# Throughput\n\nProduced by `{}` ({}, {on}; {} clients for single operations, batches of {BATCH}; medians of {} rounds, each measuring every layout in turn). redis-benchmark SET: {:.0}/s single, {:.0}/s pipelined. Server CPU is the `INFO cpu` (user + sys) delta over each operation's run less the server's idle rate (read over a second before each layout) for that long, per session{}.\n\n{}\n{}\n{}",
        report.command,
        report.redis_version,
        report.clients,
        report.rounds,
        report.set_baseline.single,
        report.set_baseline.pipelined,
        if cluster {
            ", summed over the primaries"
        } else {
            ""
        },
        report.table(),
        report.cluster_tables(),
        report.wait_table(),
    );
    for (name, text) in [("throughput.json", json), ("throughput.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    println!(
        "\n{}\n{}\n{}",
        report.table(),
        report.cluster_tables(),
        report.wait_table()
    );
    Ok(())
}

/// A profile's data for a session's number, as a typed store's
/// attributes.
type Attrs = throughput::Attrs<std::collections::HashMap<String, serde_json::Value>>;

/// One layout to measure.
#[derive(Clone, Copy)]
struct Run {
    layout: LayoutKind,
    bits: u8,
    /// A compact layout with a user index of as many buckets.
    users: bool,
    /// A growing compact layout, `bits` its group bits.
    growing: bool,
}

/// Opens a layout over `conn` and measures every operation on it.
async fn measure<C>(
    conn: C,
    run: Run,
    label: &str,
    args: &ThroughputArgs,
    nodes: &mut Nodes,
) -> Result<Vec<throughput::Rate>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut opened = run.layout.open(conn, run.bits).await?;
    if let (true, crate::baselines::AnyLayout::Compact(c)) = (run.users, &mut opened) {
        let config = sessionpack::users::UserIndexConfig::new(run.bits);
        let index = sessionpack::users::UserIndex::new(c.buckets().namespace(), config)?;
        *c = c.clone().with_users(Some(index));
    }
    if let (true, crate::baselines::AnyLayout::Compact(c)) = (run.growing, &mut opened) {
        *c = c.clone().with_growth(true);
    }
    match args.profile {
        None => {
            throughput::measure(
                label,
                Store::new(opened).without_sweeper(),
                std::sync::Arc::new(|_| ()),
                args.clients,
                args.sessions,
                nodes,
            )
            .await
        }
        Some(profile) => {
            let attrs: Attrs = std::sync::Arc::new(move |n| profile.data(n));
            throughput::measure(
                label,
                Store::new(opened).without_sweeper(),
                attrs,
                args.clients,
                args.sessions,
                nodes,
            )
            .await
        }
    }
}

/// Refuses `--wait-replicas n` when a primary has fewer than `n` replicas
/// connected: every write would time out.
async fn check_replicas(target: &Connected, n: u32) -> Result<()> {
    for url in &target.primaries {
        let replication = info(&mut target.open(url).await?, "replication").await?;
        let connected: u32 = replication
            .get("connected_slaves")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if connected < n {
            return Err(Error::Config(format!(
                "--wait-replicas {n}: {url} has {connected} replicas connected (start a cluster with --replicas {n})"
            )));
        }
    }
    Ok(())
}
