//! Session stores measured through the tower-sessions `SessionStore` trait
//! (as axum apps call them): bytes per session, and for each operation the
//! client's rate and the Redis server's CPU per operation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};

use super::info::{MemorySample, server_cpu_secs, wait_for_rehash};
use crate::error::{Error, Result};
use crate::profile::Profile;

/// A store behind the trait, shared by the tasks that drive it.
pub type DynStore = Arc<dyn SessionStore>;

/// One operation's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpRun {
    /// `create`, `load` or `save`.
    pub op: String,
    /// Calls made.
    pub calls: u64,
    /// Calls per second the client completed.
    pub calls_per_sec: f64,
    /// Redis server CPU (user + system, `INFO cpu`) per call, µs.
    pub server_cpu_us: f64,
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
    /// Keys in the database after creating them all.
    pub keys: u64,
    /// create, load, save.
    pub ops: Vec<OpRun>,
}

impl StoreRun {
    /// The figures of one operation.
    pub fn op(&self, op: &str) -> Option<&OpRun> {
        self.ops.iter().find(|o| o.op == op)
    }
}

/// Creates `sessions` sessions of `profile` through `store` from
/// `concurrency` tasks, measures memory, then per session: a load, a save
/// of changed data, and a request under rolling expiry (load, then save
/// of the same data a minute later). `conn` reads the server's figures;
/// the database should be empty.
pub async fn run(
    conn: &mut redis::aio::MultiplexedConnection,
    store: DynStore,
    label: String,
    profile: Profile,
    sessions: u64,
    concurrency: usize,
) -> Result<StoreRun> {
    let hash_max_listpack_value = crate::limits::ListpackLimits::read(conn).await?.hash_value;
    let before = MemorySample::read(conn).await?;
    let expiry = OffsetDateTime::now_utc() + time::Duration::hours(2);
    let tasks = concurrency.max(1) as u64;

    let mut ops = Vec::new();
    let (create, ids) = timed(conn, "create", sessions, {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move {
                let mut handles = Vec::new();
                for t in 0..tasks {
                    let store = store.clone();
                    handles.push(tokio::spawn(async move {
                        let mut ids = Vec::new();
                        for n in (t..sessions).step_by(tasks as usize) {
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
        }
    })
    .await?;
    ops.push(create);
    wait_for_rehash(conn, Duration::from_secs(30)).await?;
    let after = MemorySample::read(conn).await?;
    let bytes_per_session =
        after.used_memory.saturating_sub(before.used_memory) as f64 / sessions.max(1) as f64;

    let ids = Arc::new(ids);
    let (load, _) = timed(conn, "load", sessions, {
        let (store, ids) = (store.clone(), ids.clone());
        move || {
            per_task(
                store.clone(),
                ids.clone(),
                tasks,
                |store, (_, id)| async move {
                    match store.load(&id).await.map_err(store_error)? {
                        Some(_) => Ok(()),
                        None => Err(Error::Config(
                            "a session created in this run was not found".into(),
                        )),
                    }
                },
            )
        }
    })
    .await?;
    ops.push(load);
    // A save of changed data: what a request that writes to its session
    // sends (axum-login's login, a counter, a cart).
    let later = expiry + time::Duration::minutes(1);
    let (save, _) = timed(conn, "save", sessions, {
        let (store, ids) = (store.clone(), ids.clone());
        move || {
            per_task(
                store.clone(),
                ids.clone(),
                tasks,
                move |store, (n, id)| async move {
                    // Another user's data of the same shape: changed, about
                    // the same size.
                    let record = Record {
                        id,
                        data: profile.data(n + 1),
                        expiry_date: later,
                    };
                    store.save(&record).await.map_err(store_error)
                },
            )
        }
    })
    .await?;
    ops.push(save);
    // A request under rolling expiry (`Expiry::OnInactivity` with
    // `with_always_save(true)`): a load, then a save of the same data
    // with the expiry a minute later.
    let rolled = later + time::Duration::minutes(1);
    let (request, _) = timed(conn, "request", sessions, {
        let (store, ids) = (store.clone(), ids.clone());
        move || {
            per_task(
                store.clone(),
                ids.clone(),
                tasks,
                move |store, (_, id)| async move {
                    let mut record =
                        store.load(&id).await.map_err(store_error)?.ok_or_else(|| {
                            Error::Config("a session created in this run was not found".into())
                        })?;
                    record.expiry_date = rolled;
                    store.save(&record).await.map_err(store_error)
                },
            )
        }
    })
    .await?;
    ops.push(request);

    Ok(StoreRun {
        profile,
        store: label,
        hash_max_listpack_value,
        bytes_per_session,
        keys: after.keys,
        ops,
    })
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
async fn per_task<F, Fut>(
    store: DynStore,
    ids: Arc<Vec<(u64, Id)>>,
    tasks: u64,
    call: F,
) -> Result<Vec<()>>
where
    F: Fn(DynStore, (u64, Id)) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
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

/// Runs `work`, timing it and taking the server's CPU around it.
async fn timed<F, Fut, T>(
    conn: &mut redis::aio::MultiplexedConnection,
    op: &str,
    calls: u64,
    work: F,
) -> Result<(OpRun, T)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let cpu = server_cpu_secs(conn).await?;
    let started = Instant::now();
    let out = work().await?;
    let secs = started.elapsed().as_secs_f64();
    let cpu = server_cpu_secs(conn).await? - cpu;
    Ok((
        OpRun {
            op: op.to_owned(),
            calls,
            calls_per_sec: calls as f64 / secs.max(1e-9),
            server_cpu_us: cpu * 1e6 / calls.max(1) as f64,
        },
        out,
    ))
}
