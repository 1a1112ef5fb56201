//! Session stores measured through the tower-sessions `SessionStore` trait
//! (as axum apps call them), side by side on one server: bytes per
//! session, and for each operation the client's rate, the Redis server's
//! CPU per call and the commands each call sent.
//!
//! Memory is taken store by store (each fills the server in turn). The
//! operations then run in rounds, every store once per round in turn, so
//! the machine's noise falls on all of them alike; each figure is the
//! median of the rounds.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};

use super::anatomy::{Anatomy, Recorder};
use super::info::{CommandStats, MemorySample, server_cpu_secs, wait_for_rehash};
use crate::profile::Profile;
use sessionpack::error::{Error, Result};

/// A store behind the trait, shared by the tasks that drive it.
pub type DynStore = Arc<dyn SessionStore>;

/// The operations, in the order each round runs them.
pub const OPS: [&str; 7] = [
    "create",
    "load",
    "save",
    "save-unseen",
    "request",
    "delete",
    "delete-unseen",
];

/// One store to measure.
pub struct Contender {
    /// Its name in reports, e.g. `sessionpack (compact 2^13)`.
    pub label: String,
    /// The store.
    pub store: DynStore,
    /// The same sessions as another process sees them, which has loaded
    /// none of them (for a store that remembers nothing, the store again).
    pub unseen: DynStore,
}

/// One command's share of an operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommandShare {
    /// The command, as `INFO commandstats` names it.
    pub command: String,
    /// Calls of it per operation.
    pub per_op: f64,
    /// Time the server spent in it per call, µs (a script's time includes
    /// the commands it sends).
    pub usec_per_call: f64,
}

/// One operation's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpRun {
    /// One of [`OPS`].
    pub op: String,
    /// Calls per round.
    pub calls: u64,
    /// Calls per second the client completed (median of the rounds).
    pub calls_per_sec: f64,
    /// Redis server CPU (user + system, `INFO cpu`) per call, µs (median
    /// of the rounds).
    pub server_cpu_us: f64,
    /// The same, round by round.
    pub rounds_cpu_us: Vec<f64>,
    /// `RENAME`s the server ran, round by round: in these runs only a
    /// growing store's split script sends one, once per split.
    #[serde(default)]
    pub rounds_splits: Vec<u64>,
    /// What the server ran, summed over the rounds.
    pub commands: Vec<CommandShare>,
    /// Every command and script of one more round, recorded
    /// ([`super::anatomy`]; not among the rounds above), and its calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anatomy: Option<(u64, Anatomy)>,
}

impl OpRun {
    /// What one call ran on the server, e.g. `hget 1.00 × 0.31 µs`.
    pub fn commands_line(&self) -> String {
        self.commands
            .iter()
            .map(|c| format!("{} {:.2} × {:.2} µs", c.command, c.per_op, c.usec_per_call))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One store on one profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreRun {
    /// The session data's shape.
    pub profile: Profile,
    /// The store, e.g. `sessionpack (compact 2^13)` or the peer crate.
    pub store: String,
    /// The server's `hash-max-listpack-value` during the run.
    pub hash_max_listpack_value: u64,
    /// `used_memory` growth per session after creating them all.
    pub bytes_per_session: f64,
    /// Keys the store added.
    pub keys: u64,
    /// The creates that filled the store from empty (a growing store
    /// growing from its first buckets all the while), as one round.
    #[serde(default)]
    pub fill: Option<OpRun>,
    /// One per [`OPS`].
    pub ops: Vec<OpRun>,
}

impl StoreRun {
    /// The figures of one operation.
    pub fn op(&self, op: &str) -> Option<&OpRun> {
        self.ops.iter().find(|o| o.op == op)
    }
}

/// How a side-by-side run goes.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The sessions' shape.
    pub profile: Profile,
    /// Sessions each store holds.
    pub sessions: u64,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Rounds of the operations.
    pub rounds: usize,
    /// Whether one more round runs with every command recorded
    /// ([`super::anatomy`]), left out of the rounds' figures.
    pub anatomy: bool,
}

/// Fills the server with `plan.sessions` sessions from each contender in
/// turn (measuring memory), then runs [`OPS`] in rounds: `create` adds a
/// quarter as many new sessions, `delete` removes half of them from the
/// process that created them and `delete-unseen` the rest from one that
/// has seen none (a logout follows a load of the session in its request,
/// so an app's process has seen what it deletes); `load` reads
/// every session; `save` writes changed data of the same shape to each
/// (after this process loaded it); `save-unseen` the same from a process
/// that has not; `request` is a request under rolling expiry (a load,
/// then a save of the same data with the expiry a minute later). `conn`
/// reads the server's figures; the database should be empty.
pub async fn run(
    conn: &mut redis::aio::MultiplexedConnection,
    contenders: &[Contender],
    plan: Plan,
) -> Result<Vec<StoreRun>> {
    let hash_max_listpack_value = sessionpack::limits::ListpackLimits::read(conn)
        .await?
        .hash_value;
    let tasks = plan.concurrency.max(1) as u64;
    let expiry = OffsetDateTime::now_utc() + time::Duration::hours(2);
    let profile = plan.profile;

    let mut runs = Vec::new();
    let mut ids = Vec::new();
    for c in contenders {
        wait_for_rehash(conn, Duration::from_secs(30)).await?;
        let before = MemorySample::read(conn).await?;
        let (fill, created) = timed(conn, plan.sessions, || {
            create(&c.store, 0..plan.sessions, tasks, profile, expiry)
        })
        .await?;
        wait_for_rehash(conn, Duration::from_secs(30)).await?;
        let after = MemorySample::read(conn).await?;
        runs.push(StoreRun {
            profile,
            store: c.label.clone(),
            hash_max_listpack_value,
            bytes_per_session: after.used_memory.saturating_sub(before.used_memory) as f64
                / plan.sessions.max(1) as f64,
            keys: after.keys.saturating_sub(before.keys),
            fill: Some(summarize("fill", &[fill])),
            ops: Vec::new(),
        });
        ids.push(Arc::new(created));
    }

    let batch = (plan.sessions / 4).max(1);
    let rounds = plan.rounds.max(1);
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); OPS.len()]; contenders.len()];
    for round in 0..rounds + usize::from(plan.anatomy) {
        // The last round of an anatomy is recorded.
        let record = round == rounds;
        let r = round as i64;
        let saved = expiry + time::Duration::minutes(2 * r + 1);
        let rolled = saved + time::Duration::minutes(1);
        for (i, c) in contenders.iter().enumerate() {
            let ids = ids[i].clone();
            let fresh = plan.sessions + round as u64 * batch;
            let s = &mut samples[i];
            let (sample, new) = timed_as(conn, record, batch, || {
                create(&c.store, fresh..fresh + batch, tasks, profile, expiry)
            })
            .await?;
            s[0].push(sample);
            let n = ids.len() as u64;
            s[1].push(
                timed_as(conn, record, n, || {
                    each(&c.store, &ids, tasks, |store, (_, id)| async move {
                        load(&store, id).await.map(drop)
                    })
                })
                .await?
                .0,
            );
            // Another user's data of the same shape: changed, about the
            // same size.
            for (slot, store, offset) in [(2, &c.store, 1), (3, &c.unseen, 1 + rounds as u64)] {
                s[slot].push(
                    timed_as(conn, record, n, || {
                        each(store, &ids, tasks, move |store, (k, id)| async move {
                            let record = Record {
                                id,
                                data: profile.data(k + round as u64 + offset),
                                expiry_date: saved,
                            };
                            store.save(&record).await.map_err(store_error)
                        })
                    })
                    .await?
                    .0,
                );
            }
            s[4].push(
                timed_as(conn, record, n, || {
                    each(&c.store, &ids, tasks, move |store, (_, id)| async move {
                        let mut record = load(&store, id).await?;
                        record.expiry_date = rolled;
                        store.save(&record).await.map_err(store_error)
                    })
                })
                .await?
                .0,
            );
            let mut new = new;
            let unseen = Arc::new(new.split_off(new.len() / 2));
            let new = Arc::new(new);
            for (slot, store, ids) in [(5, &c.store, new), (6, &c.unseen, unseen)] {
                let n = ids.len() as u64;
                s[slot].push(
                    timed_as(conn, record, n, || {
                        each(store, &ids, tasks, |store, (_, id)| async move {
                            store.delete(&id).await.map_err(store_error)
                        })
                    })
                    .await?
                    .0,
                );
            }
        }
    }
    for (run, per_op) in runs.iter_mut().zip(samples) {
        run.ops = OPS
            .iter()
            .zip(per_op)
            .map(|(op, samples)| summarize(op, &samples))
            .collect();
    }
    Ok(runs)
}

/// One round of one operation.
#[derive(Clone, Debug)]
pub(super) struct Sample {
    calls: u64,
    secs: f64,
    cpu_secs: f64,
    commands: Vec<(String, u64, u64)>,
    /// Where the round was recorded ([`timed_as`]): what it ran.
    anatomy: Option<Anatomy>,
}

/// The figures of rounds of `op`: medians of the rounds, commands summed
/// over them; a recorded round is left out of them and gives the anatomy.
pub(super) fn summarize(op: &str, samples: &[Sample]) -> OpRun {
    let anatomy = samples
        .iter()
        .find_map(|s| Some((s.calls, s.anatomy.clone()?)));
    let samples: Vec<Sample> = samples
        .iter()
        .filter(|s| s.anatomy.is_none())
        .cloned()
        .collect();
    let samples = &samples[..];
    let per_call = |s: &Sample| s.cpu_secs * 1e6 / s.calls.max(1) as f64;
    let rounds_cpu_us: Vec<f64> = samples.iter().map(per_call).collect();
    let rounds_splits = samples
        .iter()
        .map(|s| {
            s.commands
                .iter()
                .filter(|(name, _, _)| name == "rename")
                .map(|(_, calls, _)| *calls)
                .sum()
        })
        .collect();
    let rates: Vec<f64> = samples
        .iter()
        .map(|s| s.calls as f64 / s.secs.max(1e-9))
        .collect();
    let calls: u64 = samples.iter().map(|s| s.calls).sum();
    let mut totals: Vec<(String, u64, u64)> = Vec::new();
    for (name, c, u) in samples.iter().flat_map(|s| &s.commands) {
        match totals.iter_mut().find(|t| &t.0 == name) {
            Some(t) => (t.1, t.2) = (t.1 + c, t.2 + u),
            None => totals.push((name.clone(), *c, *u)),
        }
    }
    totals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    OpRun {
        op: op.to_owned(),
        calls: samples.first().map_or(0, |s| s.calls),
        calls_per_sec: median(&rates),
        server_cpu_us: median(&rounds_cpu_us),
        rounds_cpu_us,
        rounds_splits,
        commands: totals
            .into_iter()
            // Below one call in a hundred operations: the clock's TIME,
            // the sweeper's leases; noise for this table.
            .filter(|(_, c, _)| *c * 100 >= calls)
            .map(|(command, c, u)| CommandShare {
                command,
                per_op: c as f64 / calls.max(1) as f64,
                usec_per_call: u as f64 / c.max(1) as f64,
            })
            .collect(),
        anatomy,
    }
}

/// A memo that never forgets within a side-by-side run: the sessions a
/// store fills with and those each round adds, twice over (it keeps two
/// generations).
pub fn memo_capacity(sessions: u64, rounds: usize) -> usize {
    let sessions = sessions as usize;
    2 * (sessions + rounds.max(1) * (sessions / 4).max(1))
}

/// The median of `values` (NaN for none).
pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

async fn load(store: &DynStore, id: Id) -> Result<Record> {
    store
        .load(&id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| Error::Config("a session created in this run was not found".into()))
}

/// Creates a session of `profile` for each number in `range`, split over
/// `tasks` tasks; returns (number, id) pairs.
async fn create(
    store: &DynStore,
    range: std::ops::Range<u64>,
    tasks: u64,
    profile: Profile,
    expiry: OffsetDateTime,
) -> Result<Vec<(u64, Id)>> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        let range = range.clone();
        handles.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in range.skip(t as usize).step_by(tasks as usize) {
                let mut record = Record {
                    id: Id::default(),
                    data: profile.data(n),
                    expiry_date: expiry,
                };
                store.create(&mut record).await.map_err(store_error)?;
                ids.push((n, record.id));
            }
            Ok::<_, Error>(ids)
        }));
    }
    join_all(handles).await
}

fn store_error(e: tower_sessions_core_014::session_store::Error) -> Error {
    Error::Config(format!("session store: {e}"))
}

async fn join_all<T: Send + 'static>(
    handles: Vec<tokio::task::JoinHandle<Result<Vec<T>>>>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for h in handles {
        out.extend(
            h.await
                .map_err(|e| Error::Config(format!("a benchmark task failed: {e}")))??,
        );
    }
    Ok(out)
}

/// Runs `call` once per id, the ids split over `tasks` tasks.
async fn each<F, Fut>(
    store: &DynStore,
    ids: &Arc<Vec<(u64, Id)>>,
    tasks: u64,
    call: F,
) -> Result<Vec<()>>
where
    F: Fn(DynStore, (u64, Id)) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let mut handles = Vec::new();
    for t in 0..tasks as usize {
        let (store, ids, call) = (store.clone(), ids.clone(), call.clone());
        handles.push(tokio::spawn(async move {
            for &item in ids.iter().skip(t).step_by(tasks as usize) {
                call(store.clone(), item).await?;
            }
            Ok::<_, Error>(Vec::new())
        }));
    }
    join_all(handles).await
}

/// Runs `work` (`calls` calls), timing it and taking the server's CPU and
/// command counts around it.
pub(super) async fn timed<F, Fut, T>(
    conn: &mut redis::aio::MultiplexedConnection,
    calls: u64,
    work: F,
) -> Result<(Sample, T)>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    timed_as(conn, false, calls, work).await
}

/// [`timed`], with every command the server runs recorded where `record`
/// ([`super::anatomy`]): such a sample gives the anatomy, not figures.
pub(super) async fn timed_as<F, Fut, T>(
    conn: &mut redis::aio::MultiplexedConnection,
    record: bool,
    calls: u64,
    work: F,
) -> Result<(Sample, T)>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if record {
        // Nothing else is read meanwhile: the log's drains share the
        // connection, and a recorded round gives no figures.
        let recorder = Recorder::start(conn).await?;
        let started = Instant::now();
        let out = work().await;
        let secs = started.elapsed().as_secs_f64();
        // The server's log settings go back whatever the work did.
        let anatomy = recorder.finish().await?;
        let sample = Sample {
            calls,
            secs,
            cpu_secs: 0.0,
            commands: Vec::new(),
            anatomy: Some(anatomy),
        };
        return Ok((sample, out?));
    }
    let stats = CommandStats::read(conn).await?;
    let cpu = server_cpu_secs(conn).await?;
    let started = Instant::now();
    let out = work().await?;
    let secs = started.elapsed().as_secs_f64();
    let cpu_secs = server_cpu_secs(conn).await? - cpu;
    let commands = CommandStats::read(conn).await?.since(&stats);
    Ok((
        Sample {
            calls,
            secs,
            cpu_secs,
            commands,
            anatomy: None,
        },
        out,
    ))
}
