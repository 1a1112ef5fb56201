//! `sessionpack bench day`: a day of traffic, compressed and replayed
//! through one framework's session-store trait against sessionpack's
//! store exactly as its quickstart opens it (`TowerStore::connect` or
//! `ActixStore::connect`: in-app sweeper, write threshold, learned
//! dictionary) and against that framework's peer (`tower-sessions-redis-store`
//! or actix-session's `RedisSessionStore`, feature `peer-bench`), each
//! alone on the same emptied server: the server CPU a request costs with
//! the cleanup of expired sessions included, memory per live session,
//! latency at a fixed offered load (see [`crate::harness::day`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::Target;
use crate::harness::actix_as_tower::ActixAsTower;
use crate::harness::day::{self, DayPlan, DayRun, Mix};
use crate::harness::info::ServerInfo;
use crate::harness::tower::DynStore;
use crate::profile::Profile;
use sessionpack::actix::ActixStore;
use sessionpack::error::{Error, Result};
use sessionpack::tower::TowerStore;

/// Arguments of `sessionpack bench day`.
#[derive(Debug, Args)]
pub struct DayArgs {
    #[command(flatten)]
    target: Target,
    /// The framework whose session-store trait the requests go through
    /// (its quickstart store against its peer).
    #[arg(long, value_enum, default_value = "tower")]
    framework: Framework,
    /// The sessions' shape.
    #[arg(long, default_value = "axum-login-app")]
    profile: Profile,
    /// Returning users, each signed in before the traffic.
    #[arg(long, default_value_t = 50_000, value_parser = super::count::positive)]
    users: u64,
    /// Requests of the traffic.
    #[arg(long, default_value_t = 300_000, value_parser = super::count::positive)]
    requests: u64,
    /// Share of requests from new visitors who sign in and never return.
    #[arg(long, default_value_t = 0.05)]
    visitors: f64,
    /// Weights of what a returning user's request does with its session:
    /// read only, rolling expiry (saved unchanged), changed, logout.
    #[arg(long, value_delimiter = ',', num_args = 4, default_values_t = [0.55, 0.30, 0.13, 0.02])]
    mix: Vec<f64>,
    /// A session's lifetime after its last write, seconds: long beside
    /// the seconds between a user's requests (about users × concurrency /
    /// requests per second), as a day-long lifetime is beside requests
    /// minutes apart, so the write threshold skips what it would in an
    /// app.
    #[arg(long, default_value_t = 120)]
    idle_secs: u64,
    /// Concurrent callers during the traffic.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Requests per second offered in the latency phase.
    #[arg(long, default_value_t = 2_000.0)]
    rate: f64,
    /// Requests of the latency phase.
    #[arg(long, default_value_t = 20_000)]
    latency_requests: u64,
    /// Requests of the traffic run again after the latency phase with
    /// every command the server runs recorded in its SLOWLOG: which
    /// scripts and commands a request costs, and what each script spends
    /// beyond the commands it sends (0: none).
    #[arg(long, default_value_t = 50_000)]
    anatomy_requests: u64,
    /// Seed of the requests' random sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for day.json and day.md.
    #[arg(long, default_value = "results/day")]
    out: PathBuf,
}

/// The quickstart's sweep interval: the cleanup waits one lifetime, one
/// interval, and this much more for the pass itself.
const CLEANUP_SLACK: Duration = Duration::from_secs(10);

/// How long the idle server's own CPU is measured before each store's
/// run: long enough to hold 150 of its cron's ticks at the default `hz`.
const IDLE_WINDOW: Duration = Duration::from_secs(15);

pub(super) async fn run(args: DayArgs) -> Result<()> {
    let [read, rolling, change, logout] = args.mix[..] else {
        return Err(Error::Config("--mix takes four weights".into()));
    };
    if !(0.0..=1.0).contains(&args.visitors) || args.mix.iter().any(|w| *w < 0.0) {
        return Err(Error::Config(
            "--visitors is a share (0..=1) and --mix weights are not negative".into(),
        ));
    }
    let idle = Duration::from_secs(args.idle_secs.max(1));
    let interval = sessionpack::session::sweep::SweepConfig::default().interval;
    let plan = DayPlan {
        profile: args.profile,
        users: args.users,
        requests: args.requests,
        visitors: args.visitors,
        mix: Mix {
            read,
            rolling,
            change,
            logout,
        },
        idle,
        concurrency: args.concurrency.max(1),
        rate: args.rate,
        latency_requests: args.latency_requests,
        anatomy_requests: args.anatomy_requests,
        cleanup: idle + interval + CLEANUP_SLACK,
        seed: args.seed,
    };
    let (target, url) = args.target.connect_server("bench day").await?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let server = ServerInfo::read(&mut conn).await?;
    let mut runs: Vec<DayRun> = Vec::new();
    for contender in args.framework.contenders() {
        target.flush().await?;
        // The idle server, before the store opens (its sweeper starts with
        // it).
        let idle = day::idle_cpu(&mut conn, IDLE_WINDOW).await?;
        let Some(store) = contender.open(&url).await? else {
            continue;
        };
        println!("{}: {} requests", contender.label(), plan.requests);
        let run = day::run(&mut conn, contender.label(), store, plan, idle).await?;
        print_run(&run);
        runs.push(run);
    }
    target.flush().await?;
    write_report(&args, &plan, &server, &runs)
}

/// The framework a replay goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Framework {
    /// tower-sessions (axum): `TowerStore::connect` against
    /// tower-sessions-redis-store.
    Tower,
    /// actix-session (actix-web): `ActixStore::connect` against
    /// actix-session's `RedisSessionStore`.
    Actix,
}

impl Framework {
    fn contenders(self) -> [Contender; 2] {
        match self {
            Self::Tower => [Contender::TowerQuickstart, Contender::TowerPeer],
            Self::Actix => [Contender::ActixQuickstart, Contender::ActixPeer],
        }
    }

    /// How the requests reach the stores, and the sign-in's rotation, for
    /// the report.
    fn through(self) -> (&'static str, &'static str) {
        match self {
            Self::Tower => (
                "through tower-sessions-core 0.14's `SessionStore`: sessionpack's store exactly as `TowerStore::connect` opens it",
                "`delete` and `create`, as tower-sessions' `cycle_id`",
            ),
            Self::Actix => (
                "through actix-session 0.11's `SessionStore`, called as its middleware calls it (a new session is a `save`, a changed one an `update`, an unchanged one under rolling expiry, `PersistentSession` with `TtlExtensionPolicy::OnEveryRequest`, an `update_ttl`, a logout a `delete`): sessionpack's store exactly as `ActixStore::connect` opens it",
                "`delete` and `save` under a new key, as actix-session's `renew`",
            ),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Contender {
    TowerQuickstart,
    TowerPeer,
    ActixQuickstart,
    ActixPeer,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Self::TowerQuickstart => "sessionpack (TowerStore::connect)",
            Self::TowerPeer => "tower-sessions-redis-store 0.16",
            Self::ActixQuickstart => "sessionpack (ActixStore::connect)",
            Self::ActixPeer => "actix-session 0.11 RedisSessionStore",
        }
    }

    async fn open(self, url: &str) -> Result<Option<DynStore>> {
        let label = self.label();
        match self {
            Self::TowerQuickstart => {
                Ok(Some(Arc::new(TowerStore::connect(url).await?) as DynStore))
            }
            Self::TowerPeer => super::bench_tower::peer_store(url).await,
            Self::ActixQuickstart => {
                let store = ActixStore::connect(url).await?;
                Ok(Some(Arc::new(ActixAsTower::new(store, label)) as DynStore))
            }
            Self::ActixPeer => Ok(super::bench_actix::peer_store(url)
                .await?
                .map(|store| Arc::new(ActixAsTower::new(store, label)) as DynStore)),
        }
    }
}

fn print_run(run: &DayRun) {
    println!(
        "  {:.2} µs server CPU per request ({:.2} traffic + {:.2} cleanup; idle server {:.2}% of a core taken out), cleanup {:.2} µs per session removed ({} removed), {:.0} requests per core-second, {:.1} B per live session, p50 {:.2} ms, p99 {:.2} ms",
        run.cpu_us_per_request,
        run.traffic_cpu_us,
        run.cleanup_cpu_us,
        run.idle_cpu_share * 100.0,
        run.cleanup_us_per_reclaimed,
        run.reclaimed,
        run.requests_per_core_sec,
        run.bytes_per_live_session,
        run.p50_ms,
        run.p99_ms
    );
}

fn write_report(
    args: &DayArgs,
    plan: &DayPlan,
    server: &ServerInfo,
    runs: &[DayRun],
) -> Result<()> {
    let command = super::bench_memory::command_line();
    let peer_label = args.framework.contenders()[1].label();
    let peer = runs.iter().find(|r| r.store == peer_label);
    let (through, rotation) = args.framework.through();
    let Mix {
        read,
        rolling,
        change,
        logout,
    } = plan.mix;
    let mut md = format!(
        "# A day of traffic, replayed\n\nProduced by `{command}` ({}). Each store alone on the emptied server, {through} (a growing store, records packed with a dictionary learned from its first sessions, write threshold {}, a sweeper in the background every {} s), the peer as its README sets it up.\n\n\
         The day: {} returning users signed in first ({} profile), then {} requests from {} concurrent callers. A request is a new visitor's sign-in (a share of {}; the visitor never returns, and the session expires) or a returning user's: a `load`, then by weight {read} read only / {rolling} saved unchanged under rolling expiry / {change} changed / {logout} logged out; a user whose session is gone signs in again. A sign-in is a `create` and the id rotation at login ({rotation}). Sessions live {} s after their last write. These shares are this benchmark's assumptions, not measurements of an app: most requests read, a rolling save on every request that saves at all, a few logouts, and visitors who leave sessions to expire; change them with `--mix` and `--visitors`.\n\n\
         Server CPU is `INFO cpu` (user + system) less the idle server's own (its cron: measured for {} s before each store's run with nothing sent but `INFO`, and taken out of each phase at that rate): over the traffic, per request; and over the cleanup after the traffic and the latency phase (one lifetime, one sweep interval and {} s more, nothing sent but `INFO`: the in-app sweeper's passes, Redis's own expiry of the peer's keys; every session expires and is removed), per request of the two, and per session it removed (every session written and not deleted, from the replay's ledger; `INFO stats` `expired_keys` agrees for the peer). The cleanup removes the whole population at once where a real day removes only the sessions that end, so it weighs more here than in a day. Requests per Redis core are 1 / that CPU. Memory is `used_memory` less the clients' at the end of the traffic over the empty server's, per session live then (expired sessions not yet removed count against the live ones); after the cleanup, the keys and bytes the store keeps with no session. Latency: {} requests offered at {} per second after the traffic, each timed from when it was due.\n\n\
         | store | µs server CPU per request (traffic + cleanup) | vs peer | requests per core-second | vs peer | cleanup µs per session removed (sessions) | vs peer | idle server (% of a core) | B per live session | vs peer | keys / bytes left after the cleanup | p50 / p99 ms | vs peer (p99) | sign-ins / logouts / found gone |\n|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|---|---:|---|\n",
        server.name(),
        sessionpack::tower::DEFAULT_WRITE_THRESHOLD,
        sessionpack::session::sweep::SweepConfig::default()
            .interval
            .as_secs(),
        plan.users,
        plan.profile,
        plan.requests,
        plan.concurrency,
        plan.visitors,
        plan.idle.as_secs(),
        IDLE_WINDOW.as_secs(),
        CLEANUP_SLACK.as_secs(),
        plan.latency_requests,
        plan.rate,
    );
    let ratio = |r: &DayRun, f: &dyn Fn(&DayRun) -> f64| match peer {
        Some(p) if p.store != r.store => format!("{:.2}x", f(r) / f(p)),
        _ => "-".into(),
    };
    for r in runs {
        let _ = writeln!(
            md,
            "| {} | {:.2} ({:.2} + {:.2}) | {} | {:.0} | {} | {:.2} ({}) | {} | {:.2} | {:.1} | {} | {} / {} | {:.2} / {:.2} | {} | {} / {} / {} |",
            r.store,
            r.cpu_us_per_request,
            r.traffic_cpu_us,
            r.cleanup_cpu_us,
            ratio(r, &|r| r.cpu_us_per_request),
            r.requests_per_core_sec,
            ratio(r, &|r| r.requests_per_core_sec),
            r.cleanup_us_per_reclaimed,
            r.reclaimed,
            ratio(r, &|r| r.cleanup_us_per_reclaimed),
            r.idle_cpu_share * 100.0,
            r.bytes_per_live_session,
            ratio(r, &|r| r.bytes_per_live_session),
            r.keys_after_cleanup,
            r.bytes_after_cleanup,
            r.p50_ms,
            r.p99_ms,
            ratio(r, &|r| r.p99_ms),
            r.logins,
            r.logouts,
            r.found_gone,
        );
    }
    for r in runs {
        if r.expired_before_cleanup > 0 {
            let _ = writeln!(
                md,
                "\n{}: {} of the {} sessions removed had ended before the cleanup began (the phases before it took longer than a lifetime); the store may have removed them earlier, so its cost per session removed reads low.",
                r.store, r.expired_before_cleanup, r.reclaimed
            );
        }
        if r.server_expired_keys > 0 {
            let _ = writeln!(
                md,
                "\n{}: the server itself expired {} keys over the cleanup (`INFO stats` `expired_keys`), the ledger counts {} sessions removed (the peer keeps a key per session; sessionpack's keys the server expires are marks and records kept out of line).",
                r.store, r.server_expired_keys, r.reclaimed
            );
        }
    }
    let _ = writeln!(
        md,
        "\n## What the traffic ran on the server\n\nFrom `INFO commandstats` over the traffic: calls of each command per request × the server's time in it per call (a script's time includes the commands it sends). Commands below one call per hundred requests are left out.\n\n| store | commands per request |\n|---|---|"
    );
    for r in runs {
        let line = r
            .commands
            .iter()
            .map(|c| format!("{} {:.2} × {:.2} µs", c.command, c.per_op, c.usec_per_call))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(md, "| {} | {line} |", r.store);
    }
    if runs.iter().any(|r| r.anatomy.is_some()) {
        let _ = writeln!(
            md,
            "\n## Where the server's time goes, script by script\n\n{} more requests of the same traffic after the latency phase, with the server's SLOWLOG recording every command it ran (`cli/src/harness/anatomy.rs`): each command a client sent, each script by name with the commands it sent, and the server's time in them (the commands' own execution, as `INFO commandstats` counts it, without reading requests and writing replies). What a script spends beyond its commands is the script machinery: the call, the Lua interpreter, and each `redis.call`'s conversions. The log costs time of its own (an entry per command, those a script sends included, each with copies of its arguments), so the µs here run above the traffic's: under each table, the callers' time per call over the traffic without the log, from the table above. Read the shares and the commands per call here, the µs there; callers below one call per thousand requests are folded into one row.",
            plan.anatomy_requests
        );
        for r in runs {
            let Some((requests, anatomy)) = &r.anatomy else {
                continue;
            };
            let clean = r
                .commands
                .iter()
                .map(|c| (c.command.clone(), c.usec_per_call));
            let _ = writeln!(
                md,
                "\n### {}\n\n{}",
                r.store,
                anatomy.section(*requests, "request", 1000, clean)
            );
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json =
        serde_json::json!({ "command": command, "server": server, "plan": plan, "runs": runs });
    let json = serde_json::to_string_pretty(&json).map_err(|e| Error::Config(e.to_string()))?;
    for (name, text) in [("day.json", json), ("day.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    println!("wrote {}", args.out.join("day.md").display());
    Ok(())
}
