//! Session stores measured through actix-session's `SessionStore` trait
//! (as its middleware calls them), side by side on one server: bytes per
//! session, and for each call the client's rate and the Redis server's CPU
//! per call.
//!
//! Memory is taken store by store (each fills the server in turn). The
//! calls then run in rounds, every store once per round in turn, so the
//! machine's noise falls on all of them alike; each figure is the median
//! of the rounds.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use actix_session::storage::{SessionKey, SessionStore};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::info::{MemorySample, bytes_less_clients, wait_for_rehash};
use super::tower::{OpRun, Sample, summarize, timed_as};
use crate::profile::ActixProfile;
use sessionpack::error::{Error, Result};

/// The calls, in the order each round runs them. `-unseen`: from another
/// process, which has loaded none of the sessions it calls on.
pub const OPS: [&str; 7] = [
    "save",
    "load",
    "update",
    "update_ttl",
    "update_ttl-unseen",
    "delete",
    "delete-unseen",
];

/// One store on one profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreRun {
    /// The state's shape.
    pub profile: ActixProfile,
    /// The store.
    pub store: String,
    /// The server's `hash-max-listpack-value` during the run.
    pub hash_max_listpack_value: u64,
    /// Growth of `used_memory` less the clients' memory per session after
    /// saving them all.
    pub bytes_per_session: f64,
    /// Keys the store added.
    pub keys: u64,
    /// One per [`OPS`].
    pub ops: Vec<OpRun>,
}

impl StoreRun {
    /// The figures of one call.
    pub fn op(&self, op: &str) -> Option<&OpRun> {
        self.ops.iter().find(|o| o.op == op)
    }
}

/// How a side-by-side run goes.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The state's shape.
    pub profile: ActixProfile,
    /// Sessions each store holds.
    pub sessions: u64,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// Rounds of the calls.
    pub rounds: usize,
}

/// The TTL every session is given (actix-session's default is a day).
const TTL: i64 = 2 * 3600;

/// One store under measure: its memory, taken when it filled the server
/// ([`Measured::fill`]), and its calls' samples, one per round
/// ([`Measured::round`], which the caller runs for every store in turn).
/// `conn` in each reads the server's figures.
pub struct Measured<S> {
    store: S,
    /// The same sessions as another process sees them, which has loaded
    /// none of them (for a store that remembers nothing, the store again).
    unseen: S,
    keys: Vec<(u64, String)>,
    run: StoreRun,
    samples: Vec<Vec<Sample>>,
}

impl<S: SessionStore> Measured<S> {
    /// Fills the server with `plan.sessions` sessions of `store`,
    /// measuring the memory they take; `unseen` calls on them as another
    /// process would.
    pub async fn fill(
        conn: &mut redis::aio::MultiplexedConnection,
        label: &str,
        (store, unseen): (S, S),
        plan: Plan,
    ) -> Result<Self> {
        let hash_max_listpack_value = sessionpack::limits::ListpackLimits::read(conn)
            .await?
            .hash_value;
        wait_for_rehash(conn, Duration::from_secs(30)).await?;
        let (before, bytes_before) = (
            MemorySample::read(conn).await?,
            bytes_less_clients(conn).await?,
        );
        let keys = save_all(&store, 0..plan.sessions, plan).await?;
        wait_for_rehash(conn, Duration::from_secs(30)).await?;
        let (after, bytes_after) = (
            MemorySample::read(conn).await?,
            bytes_less_clients(conn).await?,
        );
        Ok(Self {
            store,
            unseen,
            keys,
            run: StoreRun {
                profile: plan.profile,
                store: label.to_owned(),
                hash_max_listpack_value,
                // Clients left out: each store keeps two connections,
                // whose query buffers the server resizes on its own
                // schedule, by more than a small run's sessions.
                bytes_per_session: bytes_after.saturating_sub(bytes_before) as f64
                    / plan.sessions.max(1) as f64,
                keys: after.keys.saturating_sub(before.keys),
                ops: Vec::new(),
            },
            samples: vec![Vec::new(); OPS.len()],
        })
    }

    /// One round of every call: `save` adds a quarter as many new
    /// sessions, `load` reads every session, `update` writes each a
    /// changed state (another user's, of the same shape) with a TTL
    /// renewed, `update_ttl` renews each TTL by 30 s more from this
    /// process, which loaded them (as the middleware's `update_ttl`
    /// follows its load), and `update_ttl-unseen` by 30 s more again from
    /// another; `delete` removes half the sessions this round saved from
    /// this process (a logout, whose `purge` follows a load) and
    /// `delete-unseen` the rest from the other. A `record`ed round gives
    /// the calls' anatomy ([`super::anatomy`]) and none of their figures.
    pub async fn round(
        &mut self,
        conn: &mut redis::aio::MultiplexedConnection,
        round: u64,
        plan: Plan,
        record: bool,
    ) -> Result<()> {
        let batch = (plan.sessions / 4).max(1);
        let fresh = plan.sessions + round * batch;
        let store = &self.store;
        let (sample, new) = timed_as(conn, record, batch, || {
            save_all(store, fresh..fresh + batch, plan)
        })
        .await?;
        self.samples[0].push(sample);
        let n = self.keys.len() as u64;
        let keys = &self.keys;
        let (sample, ()) = timed_as(conn, record, n, || {
            each(keys, plan, |(_, key)| async move {
                store
                    .load(&session_key(key)?)
                    .await
                    .map_err(|e| bench_error("load", e))?
                    .ok_or_else(|| {
                        Error::Config("a session saved in this run was not found".into())
                    })
                    .map(drop)
            })
        })
        .await?;
        self.samples[1].push(sample);
        let ttl = actix_web_time(TTL + 60 * (round as i64 + 1));
        let (sample, ()) = timed_as(conn, record, n, || {
            each(keys, plan, |(k, key)| async move {
                let state = plan.profile.state(k + round + 1);
                store
                    .update(session_key(key)?, state, &ttl)
                    .await
                    .map_err(|e| bench_error("update", e))
                    .map(drop)
            })
        })
        .await?;
        self.samples[2].push(sample);
        for (slot, store, later) in [(3, store, 30), (4, &self.unseen, 60)] {
            let ttl = actix_web_time(TTL + 60 * (round as i64 + 1) + later);
            let (sample, ()) = timed_as(conn, record, n, || {
                each(keys, plan, |(_, key)| async move {
                    store
                        .update_ttl(&session_key(key)?, &ttl)
                        .await
                        .map_err(|e| bench_error("update_ttl", e))
                })
            })
            .await?;
            self.samples[slot].push(sample);
        }
        let mut seen = new;
        let unseen = seen.split_off(seen.len() / 2);
        for (slot, store, keys) in [(5, store, &seen), (6, &self.unseen, &unseen)] {
            let (sample, ()) = timed_as(conn, record, keys.len() as u64, || {
                each(keys, plan, |(_, key)| async move {
                    store
                        .delete(&session_key(key)?)
                        .await
                        .map_err(|e| bench_error("delete", e))
                })
            })
            .await?;
            self.samples[slot].push(sample);
        }
        Ok(())
    }

    /// The figures, medians of the rounds.
    pub fn finish(mut self) -> StoreRun {
        self.run.ops = OPS
            .iter()
            .zip(&self.samples)
            .map(|(op, samples)| summarize(op, samples))
            .collect();
        self.run
    }
}

fn actix_web_time(secs: i64) -> time::Duration {
    time::Duration::seconds(secs)
}

fn session_key(key: &str) -> Result<SessionKey> {
    SessionKey::try_from(key.to_owned()).map_err(|e| Error::Config(format!("session key: {e}")))
}

fn bench_error(call: &str, e: impl std::fmt::Display) -> Error {
    Error::Config(format!("session store {call}: {e}"))
}

/// Saves a session of the profile for each number in `range`; returns
/// (number, key) pairs.
async fn save_all<S: SessionStore>(
    store: &S,
    range: std::ops::Range<u64>,
    plan: Plan,
) -> Result<Vec<(u64, String)>> {
    let ttl = actix_web_time(TTL);
    let ttl = &ttl;
    futures_util::stream::iter(range)
        .map(|n| async move {
            let state: HashMap<String, String> = plan.profile.state(n);
            let key = store
                .save(state, ttl)
                .await
                .map_err(|e| bench_error("save", e))?;
            Ok::<_, Error>((n, String::from(key)))
        })
        .buffer_unordered(plan.concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Runs `call` once per key, `plan.concurrency` at a time.
async fn each<'k, F, Fut>(keys: &'k [(u64, String)], plan: Plan, call: F) -> Result<()>
where
    F: Fn((u64, &'k str)) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let results: Vec<Result<()>> = futures_util::stream::iter(keys)
        .map(|(n, key)| call((*n, key.as_str())))
        .buffer_unordered(plan.concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}
