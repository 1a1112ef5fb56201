//! A day of traffic, compressed and replayed through the tower-sessions
//! `SessionStore` trait (an actix-session store behind it as its
//! middleware would call it, [`super::actix_as_tower`]), store by store on
//! one server: what the requests
//! cost the Redis server in CPU (cleanup of expired sessions included),
//! the memory the sessions hold meanwhile, and the latency at a fixed
//! offered load.
//!
//! Each request is what a tower-sessions app sends its store:
//! - a visitor's first request signs in: a `create` (the session the
//!   visitor gets), then the sign-in's id rotation (`cycle_id`: a `delete`
//!   of the old id and a `create` of the new);
//! - a returning user's request `load`s the session; if it is gone
//!   (expired, or logged out) the user signs in again as above; else the
//!   request only reads it, saves it under rolling expiry (`save` of the
//!   same data, the expiry moved on), changes it (`save` of other data of
//!   the same shape: a cart, a flash message), or logs out (`delete`).
//!
//! Sessions expire `idle` after their last write, so the visitors who do
//! not return leave sessions to expire, which the store removes as its
//! quickstart does (sessionpack's in-app sweeper; Redis's own expiry of
//! the peer's keys). After the traffic, and requests at a fixed offered
//! rate to time them, the run waits out one lifetime and one sweep
//! interval (the cleanup: every session expires and is removed) and counts
//! the server's CPU over it as part of the day's bill, and per session it
//! removed. The idle server's own CPU (its cron, measured before each
//! store's run with nothing sent: [`idle_cpu`]) is taken out of both
//! phases' figures, so what is left is what the store's work cost. Before
//! the cleanup,
//! more requests of the same traffic run with every command the server
//! runs recorded ([`super::anatomy`]): which scripts and commands the
//! requests cost, and what each script spends beyond the commands it
//! sends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tower_sessions_core_014::session::{Id, Record};

use super::anatomy::{Anatomy, Recorder};
use super::info::{CommandStats, bytes_less_clients, expired_keys, server_cpu_secs};
use super::tower::{CommandShare, DynStore};
use crate::profile::Profile;
use sessionpack::error::{Error, Result};

/// What a returning user's request does with a session it found, as
/// shares of those requests (they need not sum to 1; they are weights).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Mix {
    /// Requests that only read the session.
    pub read: f64,
    /// Requests under rolling expiry: the same data saved, the expiry
    /// moved on.
    pub rolling: f64,
    /// Requests that change the session (a cart, a flash message).
    pub change: f64,
    /// Logouts.
    pub logout: f64,
}

/// How a replay goes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct DayPlan {
    /// The sessions' shape.
    pub profile: Profile,
    /// Returning users (each signed in before the traffic starts).
    pub users: u64,
    /// Requests of the traffic.
    pub requests: u64,
    /// Share of requests from a new visitor who signs in and never
    /// returns (whose session is left to expire).
    pub visitors: f64,
    /// What returning users' requests do.
    pub mix: Mix,
    /// A session's lifetime after its last write.
    pub idle: Duration,
    /// Concurrent callers during the traffic.
    pub concurrency: usize,
    /// Requests per second offered in the latency phase.
    pub rate: f64,
    /// Requests of the latency phase.
    pub latency_requests: u64,
    /// Requests of the traffic run again with every command recorded
    /// ([`super::anatomy`]), after the latency phase; 0 for none.
    #[serde(default)]
    pub anatomy_requests: u64,
    /// How long after the traffic the cleanup is waited for.
    pub cleanup: Duration,
    /// The random sequence's seed: every store meets the same requests.
    pub seed: u64,
}

/// One store's day.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DayRun {
    /// The store.
    pub store: String,
    /// Requests of the traffic, and of them: sign-ins, logouts, and loads
    /// that found the session gone.
    pub requests: u64,
    /// Sign-ins (first requests of visitors, and returning users whose
    /// session was gone).
    pub logins: u64,
    /// Logouts.
    pub logouts: u64,
    /// Loads that found the session gone (expired, or removed).
    pub found_gone: u64,
    /// Seconds the traffic took.
    pub traffic_secs: f64,
    /// The idle server's own CPU, in seconds per second (a share of one
    /// core), measured before the run: taken out of the figures below.
    #[serde(default)]
    pub idle_cpu_share: f64,
    /// Server CPU over the traffic, µs per request, the idle server's
    /// taken out.
    pub traffic_cpu_us: f64,
    /// Server CPU over the cleanup after the traffic and the latency
    /// phase, µs per request of the two, the idle server's taken out.
    pub cleanup_cpu_us: f64,
    /// The same over the cleanup, with the idle server's in.
    #[serde(default)]
    pub cleanup_gross_cpu_us: f64,
    /// Sessions the cleanup removed: every session written and not
    /// deleted (the client's ledger), all live when it began
    /// ([`DayRun::expired_before_cleanup`] says otherwise).
    #[serde(default)]
    pub reclaimed: u64,
    /// Of those, sessions whose lifetime had ended before the cleanup
    /// began (the phases before it took longer than a lifetime), which
    /// the store may have removed before it; 0 in a run whose per-session
    /// cleanup figure holds exactly.
    #[serde(default)]
    pub expired_before_cleanup: u64,
    /// Server CPU over the cleanup, the idle server's taken out, µs per
    /// session it removed.
    #[serde(default)]
    pub cleanup_us_per_reclaimed: f64,
    /// Keys the server itself expired over the cleanup (`INFO stats`
    /// `expired_keys`): for a store of one key per session, the sessions
    /// it removed, the ledger's check.
    #[serde(default)]
    pub server_expired_keys: u64,
    /// The two together: the day's bill per request.
    pub cpu_us_per_request: f64,
    /// Requests one Redis core would serve, from that bill.
    pub requests_per_core_sec: f64,
    /// Sessions live at the end of the traffic (the client's ledger).
    pub live_sessions: u64,
    /// Memory (`used_memory` less the clients') at the end of the traffic
    /// over the empty server's, per live session: expired sessions not yet
    /// removed count against the live ones.
    pub bytes_per_live_session: f64,
    /// Keys on the server after the cleanup (every session has expired
    /// by then: none is written during it).
    pub keys_after_cleanup: u64,
    /// Memory after the cleanup over the empty server's: what the store
    /// keeps with no session.
    pub bytes_after_cleanup: u64,
    /// Latency at the offered rate, ms: median and 99th percentile,
    /// counted from when each request was due.
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// What the server ran over the traffic, per request.
    pub commands: Vec<CommandShare>,
    /// Every command and script of the anatomy's requests
    /// ([`DayPlan::anatomy_requests`]), and how many requests they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anatomy: Option<(u64, Anatomy)>,
}

/// What a request did, for the ledger.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    requests: u64,
    logins: u64,
    logouts: u64,
    found_gone: u64,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Self) {
        self.requests += o.requests;
        self.logins += o.logins;
        self.logouts += o.logouts;
        self.found_gone += o.found_gone;
    }
}

/// A task's users: the session each holds and when it expires.
struct Users {
    sessions: Vec<Option<(Id, OffsetDateTime)>>,
    /// Visitors' sessions: created, never visited again.
    visitors: Vec<OffsetDateTime>,
    next_visitor: u64,
}

/// The server's CPU with nothing sent but `INFO` for `window`, in
/// seconds per second: what the idle server spends on its own (its cron,
/// active expiry's scan of nothing), to take out of a phase's figures.
pub async fn idle_cpu(
    conn: &mut redis::aio::MultiplexedConnection,
    window: Duration,
) -> Result<f64> {
    let cpu = server_cpu_secs(conn).await?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let spent = server_cpu_secs(conn).await? - cpu;
    Ok((spent / started.elapsed().as_secs_f64()).max(0.0))
}

/// Runs `plan` on `store` alone (the server should be empty; `conn`
/// reads its figures): signs the users in, replays the traffic, measures
/// latency at the offered rate, then waits for the cleanup. `idle` is the
/// idle server's CPU share ([`idle_cpu`]), taken out of each phase's.
pub async fn run(
    conn: &mut redis::aio::MultiplexedConnection,
    label: &str,
    store: DynStore,
    plan: DayPlan,
    idle: f64,
) -> Result<DayRun> {
    let empty = bytes_less_clients(conn).await?;
    let tasks = plan.concurrency.max(1);
    // The returning users, split over the tasks, signed in.
    let mut shards: Vec<Users> = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let n = (plan.users as usize + tasks - 1 - t) / tasks;
        shards.push(Users {
            sessions: vec![None; n],
            visitors: Vec::new(),
            next_visitor: 0,
        });
    }
    let shards = drive(&store, shards, &plan, Phase::SignIn).await?.0;

    let stats = CommandStats::read(conn).await?;
    let cpu = server_cpu_secs(conn).await?;
    let started = Instant::now();
    let (shards, counts, _) = drive(&store, shards, &plan, Phase::Traffic).await?;
    let traffic_secs = started.elapsed().as_secs_f64();
    let traffic_cpu = server_cpu_secs(conn).await? - cpu;
    let commands = CommandStats::read(conn).await?.since(&stats);
    let bytes = bytes_less_clients(conn).await?.saturating_sub(empty);
    let now = OffsetDateTime::now_utc();
    let live = |shards: &[Users], at: OffsetDateTime| {
        shards
            .iter()
            .flat_map(|s| s.sessions.iter())
            .filter(|s| s.is_some_and(|(_, expiry)| expiry > at))
            .count() as u64
    };
    let live_sessions = live(&shards, now);

    // Latency at the offered rate, before the cleanup (which leaves no
    // session live).
    let (shards, latency_counts, latencies) = drive(&store, shards, &plan, Phase::Latency).await?;
    // The anatomy: more of the traffic, every command recorded.
    let (shards, anatomy, anatomy_counts) = if plan.anatomy_requests > 0 {
        let recorder = Recorder::start(conn).await?;
        let driven = drive(&store, shards, &plan, Phase::Anatomy).await;
        // The server's log settings go back whatever the requests did.
        let anatomy = recorder.finish().await?;
        let (shards, counts, _) = driven?;
        (shards, Some((counts.requests, anatomy)), counts)
    } else {
        (shards, None, Counts::default())
    };
    let mut latencies = latencies;
    latencies.sort_by(f64::total_cmp);
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };

    // What the cleanup removes: every session written and not deleted.
    let now = OffsetDateTime::now_utc();
    let ends = shards.iter().flat_map(|s| {
        s.sessions
            .iter()
            .flatten()
            .map(|(_, expiry)| *expiry)
            .chain(s.visitors.iter().copied())
    });
    let (reclaimed, expired_before_cleanup) = ends.fold((0, 0), |(all, ended), expiry| {
        (all + 1, ended + u64::from(expiry <= now))
    });
    drop(shards);
    let expired = expired_keys(conn).await?;
    let cpu = server_cpu_secs(conn).await?;
    let cleanup_started = Instant::now();
    tokio::time::sleep(plan.cleanup).await;
    let cleanup_gross = server_cpu_secs(conn).await? - cpu;
    let cleanup_secs = cleanup_started.elapsed().as_secs_f64();
    let server_expired_keys = expired_keys(conn).await?.saturating_sub(expired);
    // The idle server's own CPU out (never below nothing: the idle
    // share is a measurement too).
    let cleanup_cpu = (cleanup_gross - idle * cleanup_secs).max(0.0);
    let traffic_cpu = (traffic_cpu - idle * traffic_secs).max(0.0);
    let keys_after_cleanup: u64 = redis::cmd("DBSIZE").query_async(conn).await?;
    let bytes_after = bytes_less_clients(conn).await?.saturating_sub(empty);

    let requests = counts.requests.max(1);
    let per_request = |secs: f64| secs * 1e6 / requests as f64;
    // The cleanup removes what every phase's requests left.
    let all = (counts.requests + latency_counts.requests + anatomy_counts.requests).max(1);
    let cleanup_cpu_us = cleanup_cpu * 1e6 / all as f64;
    let cleanup_gross_cpu_us = cleanup_gross * 1e6 / all as f64;
    let cpu_us = per_request(traffic_cpu) + cleanup_cpu_us;
    Ok(DayRun {
        store: label.to_owned(),
        requests: counts.requests,
        logins: counts.logins,
        logouts: counts.logouts,
        found_gone: counts.found_gone,
        traffic_secs,
        idle_cpu_share: idle,
        traffic_cpu_us: per_request(traffic_cpu),
        cleanup_cpu_us,
        cleanup_gross_cpu_us,
        reclaimed,
        expired_before_cleanup,
        cleanup_us_per_reclaimed: cleanup_cpu * 1e6 / reclaimed.max(1) as f64,
        server_expired_keys,
        cpu_us_per_request: cpu_us,
        requests_per_core_sec: 1e6 / cpu_us,
        live_sessions,
        bytes_per_live_session: bytes as f64 / live_sessions.max(1) as f64,
        keys_after_cleanup,
        bytes_after_cleanup: bytes_after,
        p50_ms: percentile(0.5),
        p99_ms: percentile(0.99),
        commands: commands
            .into_iter()
            .filter(|(_, c, _)| *c * 100 >= requests)
            .map(|(command, c, u)| CommandShare {
                command,
                per_op: c as f64 / requests as f64,
                usec_per_call: u as f64 / c.max(1) as f64,
            })
            .collect(),
        anatomy,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Every returning user signs in once.
    SignIn,
    /// The traffic, as fast as the tasks go.
    Traffic,
    /// Requests at the offered rate, each timed from when it was due.
    Latency,
    /// More of the traffic, as fast as the tasks go, for the anatomy.
    Anatomy,
}

/// Runs a phase over the tasks' users; gives them back with what the
/// requests did and, in the latency phase, each request's latency (ms).
async fn drive(
    store: &DynStore,
    shards: Vec<Users>,
    plan: &DayPlan,
    phase: Phase,
) -> Result<(Vec<Users>, Counts, Vec<f64>)> {
    let tasks = shards.len();
    let plan = Arc::new(*plan);
    let mut handles = Vec::new();
    for (t, mut users) in shards.into_iter().enumerate() {
        let (store, plan) = (store.clone(), plan.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(plan.seed ^ (t as u64 + 1) ^ phase_salt(phase));
            let mut counts = Counts::default();
            let mut latencies = Vec::new();
            match phase {
                Phase::SignIn => {
                    for i in 0..users.sessions.len() {
                        let n = (i * tasks + t) as u64;
                        users.sessions[i] = Some(sign_in(&store, &plan, n).await?);
                    }
                }
                Phase::Traffic | Phase::Anatomy => {
                    let total = match phase {
                        Phase::Traffic => plan.requests,
                        _ => plan.anatomy_requests,
                    };
                    let n = share(total, tasks, t);
                    for _ in 0..n {
                        counts += request(&store, &plan, &mut users, &mut rng, t, tasks).await?;
                    }
                }
                Phase::Latency => {
                    let n = share(plan.latency_requests, tasks, t);
                    let every = Duration::from_secs_f64(tasks as f64 / plan.rate.max(1e-3));
                    let start = tokio::time::Instant::now()
                        + Duration::from_secs_f64(t as f64 / plan.rate.max(1e-3));
                    for k in 0..n {
                        let due = start + every * k as u32;
                        tokio::time::sleep_until(due).await;
                        request(&store, &plan, &mut users, &mut rng, t, tasks).await?;
                        latencies.push(due.elapsed().as_secs_f64() * 1e3);
                    }
                }
            }
            Ok::<_, Error>((users, counts, latencies))
        }));
    }
    let mut shards = Vec::with_capacity(tasks);
    let (mut counts, mut latencies) = (Counts::default(), Vec::new());
    for h in handles {
        let (users, c, l) = h
            .await
            .map_err(|e| Error::Config(format!("a replay task failed: {e}")))??;
        shards.push(users);
        counts += c;
        latencies.extend(l);
    }
    Ok((shards, counts, latencies))
}

fn phase_salt(phase: Phase) -> u64 {
    match phase {
        Phase::SignIn => 0,
        Phase::Traffic => 0x5eed_0001,
        Phase::Latency => 0x5eed_0002,
        Phase::Anatomy => 0x5eed_0003,
    }
}

/// Task `t`'s share of `total` among `tasks`.
fn share(total: u64, tasks: usize, t: usize) -> u64 {
    let tasks = tasks as u64;
    total / tasks + u64::from((t as u64) < total % tasks)
}

/// One request (see the module docs).
async fn request(
    store: &DynStore,
    plan: &DayPlan,
    users: &mut Users,
    rng: &mut StdRng,
    t: usize,
    tasks: usize,
) -> Result<Counts> {
    let mut counts = Counts {
        requests: 1,
        ..Counts::default()
    };
    if users.sessions.is_empty() || rng.random::<f64>() < plan.visitors {
        // A visitor: numbered after every returning user.
        let n = plan.users + (users.next_visitor * tasks as u64 + t as u64);
        users.next_visitor += 1;
        let (_, expiry) = sign_in(store, plan, n).await?;
        users.visitors.push(expiry);
        counts.logins = 1;
        return Ok(counts);
    }
    let i = rng.random_range(0..users.sessions.len());
    let n = (i * tasks + t) as u64;
    let found = match users.sessions[i] {
        Some((id, _)) => store.load(&id).await.map_err(store_error)?,
        None => None,
    };
    let Some(mut record) = found else {
        if users.sessions[i].is_some() {
            counts.found_gone = 1;
        }
        users.sessions[i] = Some(sign_in(store, plan, n).await?);
        counts.logins = 1;
        return Ok(counts);
    };
    let m = plan.mix;
    let pick = rng.random::<f64>() * (m.read + m.rolling + m.change + m.logout);
    let expiry = lifetime(plan);
    if pick < m.read {
        // Read only: tower-sessions saves nothing.
    } else if pick < m.read + m.rolling {
        record.expiry_date = expiry;
        store.save(&record).await.map_err(store_error)?;
        users.sessions[i] = Some((record.id, expiry));
    } else if pick < m.read + m.rolling + m.change {
        record.data = plan.profile.data(rng.random::<u32>().into());
        record.expiry_date = expiry;
        store.save(&record).await.map_err(store_error)?;
        users.sessions[i] = Some((record.id, expiry));
    } else {
        store.delete(&record.id).await.map_err(store_error)?;
        users.sessions[i] = None;
        counts.logouts = 1;
    }
    Ok(counts)
}

/// A sign-in: the visitor's session created, then its id rotated
/// (deleted, created again under a new id) as tower-sessions' `cycle_id`
/// does at login. The new id and its expiry.
async fn sign_in(store: &DynStore, plan: &DayPlan, n: u64) -> Result<(Id, OffsetDateTime)> {
    let expiry = lifetime(plan);
    let mut record = Record {
        id: Id::default(),
        data: plan.profile.data(n),
        expiry_date: expiry,
    };
    store.create(&mut record).await.map_err(store_error)?;
    let old = record.id;
    record.id = Id::default();
    store.delete(&old).await.map_err(store_error)?;
    store.create(&mut record).await.map_err(store_error)?;
    Ok((record.id, expiry))
}

fn lifetime(plan: &DayPlan) -> OffsetDateTime {
    OffsetDateTime::now_utc() + plan.idle
}

fn store_error(e: tower_sessions_core_014::session_store::Error) -> Error {
    Error::Config(format!("session store: {e}"))
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_add_up_to_the_total() {
        for (total, tasks) in [(10, 3), (0, 4), (7, 7), (5, 8)] {
            let sum: u64 = (0..tasks).map(|t| share(total, tasks, t)).sum();
            assert_eq!(sum, total);
        }
    }
}
