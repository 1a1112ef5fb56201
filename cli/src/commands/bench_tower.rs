//! `sessionpack bench tower`: sessionpack's tower-sessions store beside the
//! peer crate (`tower-sessions-redis-store`, one key per session, built
//! with feature `peer-bench`) on the same server, through the same trait,
//! for each session profile: bytes per session, server CPU per call and
//! client calls per second.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::Target;
use crate::advisor::{self, Workload};
use crate::baselines::LayoutKind;
use crate::harness::info::ServerInfo;
use crate::harness::tower::{self, Contender, DynStore, OPS, OpRun, Plan, StoreRun};
use crate::profile::Profile;
use sessionpack::error::{Error, Result};
use sessionpack::json_map;
use sessionpack::limits::ListpackLimits;
use sessionpack::session::dictionary::Learning;
use sessionpack::tower::TowerStore;
use sessionpack::{CompactConfig, IdWidth};

/// Arguments of `sessionpack bench tower`.
#[derive(Debug, Args)]
pub struct TowerArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions per profile and store.
    #[arg(long, default_value_t = 200_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Concurrent callers (tasks sharing one connection per store).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Rounds of the operations (figures are medians of the rounds).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// No round more with every command the server runs recorded in its
    /// SLOWLOG (which scripts and commands each call costs, and what each
    /// script spends beyond the commands it sends).
    #[arg(long)]
    no_anatomy: bool,
    /// Profiles to measure (default: all).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<Profile>,
    /// log2 of the compact layout's bucket count (default: the advisor's
    /// pick for a tower-sessions store of this many sessions).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=24))]
    compact_bits: Option<u8>,
    /// Also measure the store packing each session's data with the
    /// dictionary it learns from its first 1000 writes
    /// (`Learning::default()`), in a namespace of its own.
    #[arg(long)]
    dictionary: bool,
    /// Also measure the store with buckets that grow and shrink
    /// (`CompactConfig::default()`, what `TowerStore::connect` opens), in a
    /// namespace of its own, interleaved with the fixed one.
    #[arg(long)]
    growing: bool,
    /// Also measure the store exactly as `TowerStore::connect` opens it
    /// (`tower::recommended_config()`: growing buckets, and records packed
    /// with a dictionary learned from the first sessions), in a namespace
    /// of its own.
    #[arg(long)]
    quickstart: bool,
    /// Measure at the server's own `hash-max-listpack-value` only, not
    /// also at the one the advisor recommends for the profile.
    #[arg(long)]
    default_limits: bool,
    /// Directory for tower.json and tower.md.
    #[arg(long, default_value = "results/tower")]
    out: PathBuf,
}

/// One sessionpack run with the advisor's prediction beside it.
#[derive(Debug, serde::Serialize)]
struct Row {
    run: StoreRun,
    predicted_bytes: Option<f64>,
}

pub(super) async fn run(args: TowerArgs) -> Result<()> {
    // The peer crate's store is set up for one server.
    let (target, url) = args.target.connect_server("bench tower").await?;
    target.flush().await?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let server = ServerInfo::read(&mut conn).await?;
    let default_value = server.limits.hash_value;
    let profiles = if args.profiles.is_empty() {
        Profile::ALL.to_vec()
    } else {
        args.profiles.clone()
    };
    let mut rows: Vec<Row> = Vec::new();
    for profile in profiles {
        let sizes: Vec<u64> = (0..1000)
            .map(|n| json_map::encode(&profile.data(n)).map(|b| b.len() as u64))
            .collect::<std::result::Result<_, _>>()?;
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        let recommended = advisor::recommend_hash_value(&sizes, default_value);
        let mut values = vec![default_value];
        if recommended != default_value && !args.default_limits {
            values.push(recommended);
        }
        for value in values {
            set_hash_value(&mut conn, value).await?;
            target.flush().await?;
            let limits = ListpackLimits::read(&mut conn).await?;
            let bits = advisor::tower_bits_or(args.compact_bits, args.sessions, &limits, mean);
            // Its saves come a whole phase after its loads here, and its
            // deletes after its creates, so it remembers every session it
            // loads or creates (in an app, a request saves or deletes what
            // it loaded moments before).
            let config = CompactConfig::new(bits).with_id_width(IdWidth::Bits128);
            let label = format!("sessionpack (compact 2^{bits})");
            let mut contenders =
                vec![contender(target.open(&url).await?, config, label, &args).await?];
            let mut packed_mean = None;
            if args.dictionary {
                // The advisor's column: a dictionary trained as the store
                // learns its own, measured on sessions it never saw.
                let sample = super::dictionary::profile_sample(profile, TRAINING_SESSIONS)?;
                let held = super::dictionary::HeldOut::train(
                    Learning::default().id,
                    &sample.data,
                    Learning::default().max_bytes,
                )?;
                packed_mean = Some(super::dictionary::mean(&held.after));
                let config = CompactConfig::new(bits)
                    .with_id_width(IdWidth::Bits128)
                    .with_namespace(PACKED_NAMESPACE)
                    .with_learned_dictionary(Learning::default());
                let label = format!("sessionpack + learned dictionary (compact 2^{bits})");
                contenders.push(contender(target.open(&url).await?, config, label, &args).await?);
            }
            if args.growing {
                let config = CompactConfig::default()
                    .with_id_width(IdWidth::Bits128)
                    .with_namespace(GROWING_NAMESPACE);
                let label = "sessionpack (growing)".to_owned();
                contenders.push(contender(target.open(&url).await?, config, label, &args).await?);
            }
            if args.quickstart {
                let config = sessionpack::tower::recommended_config()
                    .with_id_width(IdWidth::Bits128)
                    .with_namespace(QUICKSTART_NAMESPACE);
                let label = QUICKSTART.to_owned();
                contenders.push(contender(target.open(&url).await?, config, label, &args).await?);
            }
            if let Some(peer) = peer_store(&url).await? {
                contenders.push(Contender {
                    label: PEER.into(),
                    store: peer.clone(),
                    unseen: peer,
                });
            }
            println!("{profile}, hash-max-listpack-value {value}");
            let runs = tower::run(
                &mut conn,
                &contenders,
                Plan {
                    profile,
                    sessions: args.sessions,
                    concurrency: args.concurrency,
                    rounds: args.rounds,
                    anatomy: !args.no_anatomy,
                },
            )
            .await?;
            let workload = Workload {
                identity: 0,
                attrs_bytes: (mean.round() as u64).saturating_sub(1),
                limits,
                id_bytes: 16,
                ..Workload::new(args.sessions)
            };
            let predict = |mean: f64| {
                let workload = Workload {
                    attrs_bytes: (mean.round() as u64).saturating_sub(1),
                    ..workload
                };
                advisor::predict(LayoutKind::Compact, bits, &workload).bytes_per_session
            };
            let predictions = [Some(predict(mean)), packed_mean.map(predict)];
            for (i, run) in runs.into_iter().enumerate() {
                let predicted = predictions.get(i).copied().flatten();
                print_run(&run, predicted);
                rows.push(Row {
                    run,
                    predicted_bytes: predicted,
                });
            }
        }
    }
    target.flush().await?;
    write_report(&args, &server, &rows)
}

/// A sessionpack store opened with `config`, as the bench measures it: no
/// sweeper of its own, the write threshold, a memo of every session it
/// meets; and the same layout as a process that has met none (`unseen`:
/// the same layout, so the same learning).
async fn contender(
    conn: sessionpack::Connection,
    config: CompactConfig,
    label: String,
    args: &TowerArgs,
) -> Result<Contender> {
    let store = TowerStore::new(conn, config)
        .await?
        .without_sweeper()
        .with_write_threshold(WRITE_THRESHOLD)
        .with_memo_capacity(crate::harness::tower::memo_capacity(
            args.sessions,
            args.rounds,
        ));
    let unseen = TowerStore::from_layout(store.layout().clone())?
        .without_sweeper()
        .with_memo_capacity(0);
    Ok(Contender {
        label,
        store: Arc::new(store) as DynStore,
        unseen: Arc::new(unseen) as DynStore,
    })
}

const PEER: &str = "tower-sessions-redis-store 0.16";
/// Sessions the advisor's dictionary is made from: four fifths trained on
/// (as many as a learning store takes), a fifth held out.
const TRAINING_SESSIONS: u32 = 1250;
/// The namespace of the store that packs with a dictionary.
const PACKED_NAMESPACE: &str = "spd";
/// The namespace of the store whose buckets grow.
const GROWING_NAMESPACE: &str = "spg";
/// The namespace of the store as the quickstart opens it.
const QUICKSTART_NAMESPACE: &str = "spq";
/// Its label in reports.
const QUICKSTART: &str = "sessionpack (TowerStore::connect)";
/// The store's write threshold in these runs: a rolling save that moves
/// the expiry by less than a tenth of the lifetime left is not sent.
const WRITE_THRESHOLD: f64 = 0.1;

/// The peer crate's store on the server at `url` (feature
/// `peer-bench`; without it, `None`, and says so).
#[cfg(feature = "peer-bench")]
pub(super) async fn peer_store(url: &str) -> Result<Option<DynStore>> {
    use tower_sessions_redis_store::fred::prelude::{ClientLike, Config};
    let config = Config::from_url(url).map_err(|e| Error::Config(format!("fred: {e}")))?;
    let client = tower_sessions_redis_store::fred::clients::Client::new(config, None, None, None);
    client
        .init()
        .await
        .map_err(|e| Error::Config(format!("fred: {e}")))?;
    Ok(Some(Arc::new(tower_sessions_redis_store::RedisStore::new(
        client,
    ))))
}

#[cfg(not(feature = "peer-bench"))]
pub(super) async fn peer_store(_url: &str) -> Result<Option<DynStore>> {
    println!("the peer crate is not measured: build with --features peer-bench");
    Ok(None)
}

async fn set_hash_value(conn: &mut redis::aio::MultiplexedConnection, value: u64) -> Result<()> {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hash-max-listpack-value")
        .arg(value)
        .query_async(conn)
        .await?;
    Ok(())
}

fn print_run(run: &StoreRun, predicted: Option<f64>) {
    let predicted = predicted.map_or(String::new(), |p| format!(" (advisor: {p:.1})"));
    println!(
        "  {}: {:.1} B/session{predicted}, {} keys",
        run.store, run.bytes_per_session, run.keys
    );
    for op in &run.ops {
        println!(
            "    {:11} {:9.0} calls/s  {:5.2} µs server CPU per call  {}",
            op.op,
            op.calls_per_sec,
            op.server_cpu_us,
            op.commands_line()
        );
    }
}

/// Creates round by round, where a growing store runs: the fill from
/// empty, where a growing store grows from its first buckets; the first
/// round grows every store by a quarter, so a growing store splits its
/// buckets while it creates; the later rounds fill the same quarter again
/// into buckets already split (the deletes of each round leave them so,
/// with no sweeper to merge them), which is a store at a steady size.
fn creates_by_round(md: &mut String, rows: &[Row]) {
    if !rows.iter().any(|r| {
        r.run
            .op("create")
            .is_some_and(|o| o.rounds_splits.iter().any(|&n| n > 0))
    }) {
        return;
    }
    let _ = writeln!(
        md,
        "\n## Creates round by round\n\nServer CPU per create, µs, and the splits it set off per 1,000 creates (`RENAME`s in `INFO commandstats`: the split script sends one, but for a split at a byte's last bit, one level in eight), in the fill that made the store from empty (store by store, so the other stores did not run between its calls) and in each round. The fill grows a growing store from its first buckets; the first round grows each store by a quarter; the later ones create as many again into the buckets the first left, with the deletes between them: a store at a steady size.\n\n| profile | store | hash-max-listpack-value | fill: µs per create / splits per 1,000 | µs per create, by round | splits per 1,000 creates, by round |\n|---|---|---:|---:|---|---|"
    );
    for row in rows {
        let run = &row.run;
        let Some(create) = run.op("create") else {
            continue;
        };
        let calls = create.calls.max(1) as f64;
        let fill = run.fill.as_ref().map_or("-".to_owned(), |f| {
            let splits = f.rounds_splits.first().copied().unwrap_or(0);
            format!(
                "{:.2} / {:.1}",
                f.server_cpu_us,
                splits as f64 * 1000.0 / f.calls.max(1) as f64
            )
        });
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            run.profile,
            run.store,
            run.hash_max_listpack_value,
            fill,
            create
                .rounds_cpu_us
                .iter()
                .map(|us| format!("{us:.2}"))
                .collect::<Vec<_>>()
                .join(" / "),
            create
                .rounds_splits
                .iter()
                .map(|&n| format!("{:.1}", n as f64 * 1000.0 / calls))
                .collect::<Vec<_>>()
                .join(" / "),
        );
    }
}

fn write_report(args: &TowerArgs, server: &ServerInfo, rows: &[Row]) -> Result<()> {
    let command = super::bench_memory::command_line();
    let ops = OPS.join(" / ");
    let mut md = format!(
        "# tower-sessions stores side by side\n\nProduced by `{command}` ({}; {} sessions per profile and store, {} concurrent callers on one connection per store, every call through tower-sessions-core 0.14's `SessionStore`). Bytes per session are the growth of `used_memory` while each store in turn created its sessions. The operations then ran in {} rounds, each store once per round in turn; figures are the medians of the rounds. Server CPU is `INFO cpu` (user + system) over the calls; ratios are to the peer crate at the same `hash-max-listpack-value` in the same run.\n\nPer round: `create` adds a quarter as many sessions, `delete` removes half of them from the process that created them and `delete-unseen` the rest from one that has seen none (an app's logout deletes a session its request loaded); `load` reads every session; `save` writes changed data of the same shape (another user's) to each, from the process that loaded it; `save-unseen` the same from a process that has loaded none of them (sessionpack then reads the stored expiry before writing; the peer is the same either way); `request` is a request under rolling expiry (`Expiry::OnInactivity` with `with_always_save(true)`): a load, then a save of the same data with the expiry a minute later. sessionpack's store runs with `with_write_threshold({WRITE_THRESHOLD})`, which lets it skip that save; the peer sends a `SET`. It remembers every session it loaded or created (`with_memo_capacity`), as its saves come a whole phase after its loads here, and its deletes after its creates.\n\n| profile | store | hash-max-listpack-value | B/session (advisor) | vs peer | µs server CPU per {ops} | CPU vs peer | calls/s vs peer |\n|---|---|---:|---:|---:|---|---|---|\n",
        server.name(),
        args.sessions,
        args.concurrency,
        args.rounds,
    );
    let peer_of = |run: &StoreRun| {
        rows.iter()
            .find(|r| {
                r.run.profile == run.profile
                    && r.run.store == PEER
                    && r.run.hash_max_listpack_value == run.hash_max_listpack_value
            })
            .map(|r| &r.run)
    };
    for row in rows {
        let run = &row.run;
        let peer = peer_of(run);
        let cpu = |r: &StoreRun, op: &str| r.op(op).map_or(f64::NAN, |o| o.server_cpu_us);
        let rate = |r: &StoreRun, op: &str| r.op(op).map_or(f64::NAN, |o| o.calls_per_sec);
        let ratios = |f: &dyn Fn(&StoreRun, &str) -> f64| match peer {
            Some(p) if p.store != run.store => OPS
                .map(|op| format!("{:.2}", f(run, op) / f(p, op)))
                .join(" / "),
            _ => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1}{} | {} | {} | {} | {} |",
            run.profile,
            run.store,
            run.hash_max_listpack_value,
            run.bytes_per_session,
            row.predicted_bytes
                .map_or(String::new(), |p| format!(" ({p:.1})")),
            peer.map_or("-".into(), |p| format!(
                "{:.2}x",
                run.bytes_per_session / p.bytes_per_session
            )),
            OPS.map(|op| format!("{:.2}", cpu(run, op))).join(" / "),
            ratios(&cpu),
            ratios(&rate),
        );
    }
    creates_by_round(&mut md, rows);
    let _ = writeln!(
        md,
        "\n## What each call ran on the server\n\nFrom `INFO commandstats` over the rounds: calls of each command per operation × the server's time in it per call (a script's time includes the commands it sends, which are listed too). Commands below one call per hundred operations (the clock estimate's `TIME`) are left out.\n\n| profile | store | hash-max-listpack-value | op | commands per call |\n|---|---|---:|---|---|"
    );
    for row in rows {
        let run = &row.run;
        for op in &run.ops {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                run.profile,
                run.store,
                run.hash_max_listpack_value,
                op.op,
                op.commands_line()
            );
        }
    }
    anatomies(
        &mut md,
        rows.iter().map(|r| {
            (
                r.run.profile.to_string(),
                r.run.store.as_str(),
                &r.run.ops[..],
            )
        }),
    );
    let limits = &server.limits;
    let _ = writeln!(
        md,
        "\nRaising the limit: {}.",
        advisor::hash_value_cost(advisor::HASH_VALUE_STEPS[2], limits)
    );
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json = serde_json::json!({ "command": command, "server": server, "rows": rows });
    let json = serde_json::to_string_pretty(&json).map_err(|e| Error::Config(e.to_string()))?;
    for (name, text) in [("tower.json", json), ("tower.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    println!("wrote {}", args.out.join("tower.md").display());
    Ok(())
}

/// Each call's anatomy (a round more, recorded: [`crate::harness::anatomy`]),
/// a table per store and call.
/// Each run is its profile, its store and its calls' figures.
pub(super) fn anatomies<'a>(
    md: &mut String,
    runs: impl Iterator<Item = (String, &'a str, &'a [OpRun])>,
) {
    let mut heading = false;
    for (profile, store, ops) in runs {
        for op in ops {
            let Some((calls, anatomy)) = &op.anatomy else {
                continue;
            };
            if !heading {
                heading = true;
                let _ = writeln!(
                    md,
                    "\n## Where each call's server time goes, script by script\n\nOne round more than those above, with the server's SLOWLOG recording every command it ran (`cli/src/harness/anatomy.rs`): each command a client sent, each script by name with the commands it sent, and the server's time in them (the commands' own execution, without reading requests and writing replies). What a script spends beyond its commands is the script machinery. The log costs time of its own (an entry per command, each with copies of its arguments), so the µs here run above the rounds': under each table, the callers' time per call over the rounds without the log. Read the shares and the commands per call here, the µs there; callers below one call per hundred are folded into one row."
                );
            }
            let clean = op
                .commands
                .iter()
                .map(|c| (c.command.clone(), c.usec_per_call));
            let _ = writeln!(
                md,
                "\n### {profile}, {store}: {}\n\n{}",
                op.op,
                anatomy.section(*calls, "call", 100, clean)
            );
        }
    }
}
