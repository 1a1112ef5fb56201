//! `sessionpack bench actix`: sessionpack's actix-session store beside
//! actix-session's own `RedisSessionStore` (one key per session, built
//! with feature `peer-bench`) on the same server, through the same trait,
//! for each state profile: bytes per session, server CPU per call and
//! client calls per second.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::advisor;
use crate::harness::actix::{Measured, OPS, Plan, StoreRun};
use crate::harness::info::ServerInfo;
use crate::profile::ActixProfile;
use sessionpack::actix::ActixStore;
use sessionpack::error::{Error, Result};
use sessionpack::limits::ListpackLimits;
use sessionpack::session::dictionary::Learning;
use sessionpack::tower::DEFAULT_MEMO_CAPACITY;
use sessionpack::users::UserIndexConfig;
use sessionpack::{CompactConfig, json_map};

/// Arguments of `sessionpack bench actix`.
#[derive(Debug, Args)]
pub struct ActixArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions per profile and store.
    #[arg(long, default_value_t = 200_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Calls in flight at once (on one connection per store).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Rounds of the calls (figures are medians of the rounds).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// No round more with every command the server runs recorded in its
    /// SLOWLOG (which scripts and commands each call costs, and what each
    /// script spends beyond the commands it sends).
    #[arg(long)]
    no_anatomy: bool,
    /// Profiles to measure (default: all).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<ActixProfile>,
    /// Also measure the store packing each session's state with the
    /// dictionary it learns from its first 1000 writes
    /// (`Learning::default()`), on the same fixed buckets in a namespace
    /// of its own.
    #[arg(long)]
    dictionary: bool,
    /// Also measure the store `ActixStore::connect` opens
    /// (`map_store::recommended_config()`: growing buckets, records packed
    /// with a dictionary learned from the first sessions), and the same
    /// with a user index (`UserIndexConfig::default()`, as
    /// `examples/actix_login` opens it), each in a namespace of its own:
    /// what the index adds to each call is the difference.
    #[arg(long)]
    quickstart: bool,
    /// log2 of the fixed stores' bucket count (default: the advisor's
    /// pick for a store of this many sessions of the profile).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=24))]
    compact_bits: Option<u8>,
    /// Directory for actix.json and actix.md.
    #[arg(long, default_value = "results/actix")]
    out: PathBuf,
}

const PEER: &str = "actix-session 0.11 RedisSessionStore";
/// The store `ActixStore::connect` opens.
const QUICKSTART: &str = "sessionpack (ActixStore::connect)";
/// The same with a user index.
const QUICKSTART_INDEXED: &str = "sessionpack (ActixStore::connect + user index)";
/// The store's write threshold in these runs, as in `bench tower`.
const WRITE_THRESHOLD: f64 = 0.1;

pub(super) async fn run(args: ActixArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench actix").await?;
    target.flush().await?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let server = ServerInfo::read(&mut conn).await?;
    let limits = ListpackLimits::read(&mut conn).await?;
    let profiles = if args.profiles.is_empty() {
        ActixProfile::ALL.to_vec()
    } else {
        args.profiles.clone()
    };
    let mut rows: Vec<StoreRun> = Vec::new();
    for profile in profiles {
        let plan = Plan {
            profile,
            sessions: args.sessions,
            concurrency: args.concurrency,
            rounds: args.rounds,
        };
        // The advisor's bucket count for a store of this many sessions of
        // this size, as `bench tower` takes it.
        let sizes: Vec<u64> = (0..1000)
            .map(|n| {
                let state = profile.state(n);
                let data: std::collections::HashMap<String, serde_json::Value> = state
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::from_str(v).unwrap_or_default()))
                    .collect();
                json_map::encode(&data).map(|b| b.len() as u64)
            })
            .collect::<std::result::Result<_, _>>()?;
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        let bits = advisor::tower_bits_or(args.compact_bits, args.sessions, &limits, mean);
        println!("{profile}, hash-max-listpack-value {}", limits.hash_value);
        target.flush().await?;
        let memo = crate::harness::tower::memo_capacity(args.sessions, args.rounds);
        // Each store twice: the process that calls on the sessions, and
        // another that has seen none of them.
        let open = |config: CompactConfig| {
            let (target, url) = (&target, &url);
            async move {
                let mut pair = Vec::new();
                for capacity in [memo, DEFAULT_MEMO_CAPACITY] {
                    let store = ActixStore::new(target.open(url).await?, config.clone())
                        .await?
                        .without_sweeper()
                        .with_write_threshold(WRITE_THRESHOLD)
                        .with_memo_capacity(capacity);
                    pair.push(store);
                }
                let unseen = pair.pop().expect("two stores");
                Ok::<_, Error>((pair.pop().expect("two stores"), unseen))
            }
        };
        let label = format!("sessionpack (compact 2^{bits})");
        let mut fixed = Measured::fill(
            &mut conn,
            &label,
            open(CompactConfig::new(bits)).await?,
            plan,
        )
        .await?;
        let growing = open(CompactConfig::default().with_namespace("spg")).await?;
        let mut growing = Measured::fill(&mut conn, "sessionpack (growing)", growing, plan).await?;
        let mut packed = None;
        if args.dictionary {
            let config = CompactConfig::new(bits)
                .with_namespace("spd")
                .with_learned_dictionary(Learning::default());
            let label = format!("sessionpack + learned dictionary (compact 2^{bits})");
            packed = Some(Measured::fill(&mut conn, &label, open(config).await?, plan).await?);
        }
        let mut quickstart = Vec::new();
        if args.quickstart {
            let config = sessionpack::map_store::recommended_config();
            for (label, config) in [
                (QUICKSTART, config.clone().with_namespace("spq")),
                (
                    QUICKSTART_INDEXED,
                    config
                        .with_user_index(UserIndexConfig::default())
                        .with_namespace("spu"),
                ),
            ] {
                quickstart.push(Measured::fill(&mut conn, label, open(config).await?, plan).await?);
            }
        }
        let mut peer = match peer_store(&url).await? {
            Some(store) => {
                Some(Measured::fill(&mut conn, PEER, (store.clone(), store), plan).await?)
            }
            None => None,
        };
        // A round more, recorded, unless told not to: the anatomy.
        let rounds = args.rounds.max(1) as u64;
        for round in 0..rounds + u64::from(!args.no_anatomy) {
            let record = round == rounds;
            fixed.round(&mut conn, round, plan, record).await?;
            growing.round(&mut conn, round, plan, record).await?;
            if let Some(packed) = &mut packed {
                packed.round(&mut conn, round, plan, record).await?;
            }
            for store in &mut quickstart {
                store.round(&mut conn, round, plan, record).await?;
            }
            if let Some(peer) = &mut peer {
                peer.round(&mut conn, round, plan, record).await?;
            }
        }
        let mut runs = vec![fixed.finish(), growing.finish()];
        runs.extend(packed.map(Measured::finish));
        runs.extend(quickstart.into_iter().map(Measured::finish));
        runs.extend(peer.map(Measured::finish));
        for run in &runs {
            print_run(run);
        }
        rows.extend(runs);
    }
    target.flush().await?;
    write_report(&args, &server, &rows)
}

#[cfg(feature = "peer-bench")]
pub(super) async fn peer_store(
    url: &str,
) -> Result<Option<actix_session::storage::RedisSessionStore>> {
    actix_session::storage::RedisSessionStore::new(url)
        .await
        .map(Some)
        .map_err(|e| Error::Config(format!("RedisSessionStore: {e}")))
}

#[cfg(not(feature = "peer-bench"))]
pub(super) async fn peer_store(_url: &str) -> Result<Option<ActixStore<sessionpack::Connection>>> {
    println!("the peer crate is not measured: build with --features peer-bench");
    Ok(None)
}

fn print_run(run: &StoreRun) {
    println!(
        "  {}: {:.1} B/session, {} keys",
        run.store, run.bytes_per_session, run.keys
    );
    for op in &run.ops {
        println!(
            "    {:11} {:9.0} calls/s  {:5.2} µs server CPU per call",
            op.op, op.calls_per_sec, op.server_cpu_us
        );
    }
}

/// What the user index adds to each call of `ActixStore::connect`'s store
/// (with `--quickstart`): the server CPU with it less without it, beside
/// the peer's whole call (one command) in the same run.
fn user_index_section(md: &mut String, rows: &[StoreRun]) {
    let find = |profile, store: &str| {
        rows.iter()
            .find(|r| r.profile == profile && r.store == store)
    };
    let mut lines = String::new();
    for run in rows.iter().filter(|r| r.store == QUICKSTART_INDEXED) {
        let Some(plain) = find(run.profile, QUICKSTART) else {
            continue;
        };
        let peer = find(run.profile, PEER);
        let cells = OPS.map(|op| {
            let cpu = |r: &StoreRun| r.op(op).map_or(f64::NAN, |o| o.server_cpu_us);
            let added = cpu(run) - cpu(plain);
            match peer {
                Some(p) => format!("{added:+.2} ({:.2}x)", added / cpu(p)),
                None => format!("{added:+.2}"),
            }
        });
        let _ = writeln!(lines, "| {} | {} |", run.profile, cells.join(" / "));
    }
    if lines.is_empty() {
        return;
    }
    let ops = OPS.join(" / ");
    let _ = write!(
        md,
        "\n## What the user index adds\n\nServer CPU per call of `{QUICKSTART_INDEXED}` less that of `{QUICKSTART}` in the same run, µs; in brackets, that difference over the peer's whole call of the same kind (one `SET`, `GET`, `EXPIRE` or `DEL`): 1.00x is one more command's worth.\n\n| profile | µs added per {ops} |\n|---|---|\n{lines}"
    );
}

fn write_report(args: &ActixArgs, server: &ServerInfo, rows: &[StoreRun]) -> Result<()> {
    let command = super::bench_memory::command_line();
    let ops = OPS.join(" / ");
    let mut md = format!(
        "# actix-session stores side by side\n\nProduced by `{command}` ({}; {} sessions per profile and store, {} calls in flight on one connection per store, every call through actix-session 0.11's `SessionStore`). Bytes per session are the growth of `used_memory` less the clients' memory (the sum of `CLIENT LIST`'s `tot-mem`, read in the same `MULTI`) while each store in turn saved its sessions. The calls then ran in {} rounds, each store once per round in turn; figures are the medians of the rounds. Server CPU is `INFO cpu` (user + system) over the calls; ratios are to the peer in the same run.\n\nPer round: `save` adds a quarter as many sessions; `load` reads every session; `update` writes each another user's state of the same shape with a TTL a minute longer; `update_ttl` renews each TTL by 30 seconds more from the process that loaded them (under the middleware an `update_ttl` follows the load of its session), `update_ttl-unseen` by 30 more again from another process, which has loaded none; `delete` removes half the sessions the round saved from the process that saved them (a logout: `purge` follows a load) and `delete-unseen` the other half from the other. sessionpack's stores run with `with_write_threshold({WRITE_THRESHOLD})`: an `update_ttl` that moves the expiry by less than a tenth of its lifetime, as every one here does, sends nothing where the process saw the session last; the other process's go to the server. After a load, a delete is one `HDEL`; a process that has not loaded the session also sends a `DEL` of the key an out-of-line record would have. The peer sends an `EXPIRE` for each `update_ttl` and a `DEL` for each delete.\n\n| profile | store | B/session | vs peer | µs server CPU per {ops} | CPU vs peer | calls/s vs peer |\n|---|---|---:|---:|---|---|---|\n",
        server.name(),
        args.sessions,
        args.concurrency,
        args.rounds,
    );
    for run in rows {
        let peer = rows
            .iter()
            .find(|r| r.profile == run.profile && r.store == PEER && r.store != run.store);
        let cpu = |r: &StoreRun, op: &str| r.op(op).map_or(f64::NAN, |o| o.server_cpu_us);
        let rate = |r: &StoreRun, op: &str| r.op(op).map_or(f64::NAN, |o| o.calls_per_sec);
        let ratios = |f: &dyn Fn(&StoreRun, &str) -> f64| match peer {
            Some(p) => OPS
                .map(|op| format!("{:.2}", f(run, op) / f(p, op)))
                .join(" / "),
            None => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {} | {} | {} |",
            run.profile,
            run.store,
            run.bytes_per_session,
            peer.map_or("-".into(), |p| format!(
                "{:.2}x",
                run.bytes_per_session / p.bytes_per_session
            )),
            OPS.map(|op| format!("{:.2}", cpu(run, op))).join(" / "),
            ratios(&cpu),
            ratios(&rate),
        );
    }
    user_index_section(&mut md, rows);
    let _ = writeln!(
        md,
        "\n## What each call ran on the server\n\nFrom `INFO commandstats` over the rounds: calls of each command per call of the store × the server's time in it per call (a script's time includes the commands it sends, which are listed too). Commands below one call per hundred (the clock estimate's `TIME`) are left out.\n\n| profile | store | op | commands per call |\n|---|---|---|---|"
    );
    for run in rows {
        for op in &run.ops {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                run.profile,
                run.store,
                op.op,
                op.commands_line()
            );
        }
    }
    super::bench_tower::anatomies(
        &mut md,
        rows.iter()
            .map(|r| (r.profile.to_string(), r.store.as_str(), &r.ops[..])),
    );
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json = serde_json::json!({ "command": command, "server": server, "rows": rows });
    let json = serde_json::to_string_pretty(&json).map_err(|e| Error::Config(e.to_string()))?;
    for (name, text) in [("actix.json", json), ("actix.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    println!("wrote {}", args.out.join("actix.md").display());
    Ok(())
}
