//! Recently viewed items, packed ([`sessionpack::viewed`]) against the book's
//! ZSET per session (`update_token`: `HSET login:`, `ZADD recent:`, `ZADD
//! viewed:<token>`, `ZREMRANGEBYRANK viewed:<token> 0 -26`): bytes per
//! session for the sessions and for their items, and views per second with
//! the server's CPU per view.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::info::{MemorySample, server_cpu_secs, settled_sample};
use sessionpack::conn::ConnectOptions;
use sessionpack::error::{Error, Result};
use sessionpack::session::id::SessionId;
use sessionpack::session::layout::{Compact, CompactConfig};
use sessionpack::session::store::Store;
use sessionpack::viewed::ViewedConfig;

/// What one layout measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ViewedRun {
    /// `book` or `packed 2^B`.
    pub layout: String,
    /// Sessions loaded.
    pub sessions: u64,
    /// Items each session's list holds after the load.
    pub items: u64,
    /// `used_memory` delta per session for the sessions alone.
    pub session_bytes: f64,
    /// `used_memory` delta per session for the items, over the sessions.
    pub item_bytes: f64,
    /// RSS delta per session, sessions and items.
    pub rss_per_session: f64,
    /// Item-list keys (the book's ZSETs, the packed chunk keys) and how
    /// many of them left listpack.
    pub list_keys: u64,
    /// Of those, not listpacks.
    pub list_keys_converted: u64,
    /// Views made in the rate phase.
    pub views: u64,
    /// Views per second by the callers.
    pub views_per_sec: f64,
    /// Server CPU per view, µs (`INFO cpu` delta / views).
    pub server_cpu_us_per_view: f64,
    /// Sessions then destroyed with their items, each once.
    pub destroys: u64,
    /// Server CPU per destroy, µs: the book's `DEL viewed:<token>`, `HDEL
    /// login:`, `ZREM recent:` (its cleanup, pipelined) against one remove
    /// script that drops the chunk fields with the session.
    pub server_cpu_us_per_destroy: f64,
}

/// What a run loads and does.
#[derive(Clone, Copy, Debug)]
pub struct ViewedLoad {
    /// Sessions to load.
    pub sessions: u64,
    /// Items per session list (the book's 25).
    pub keep: u8,
    /// Item ids are drawn from `0..catalogue`.
    pub catalogue: u64,
    /// Views in the rate phase, on random sessions.
    pub views: u64,
    /// Concurrent callers.
    pub clients: usize,
}

/// Sessions live this long: none expires during a run.
const TTL_SECS: u64 = 24 * 3600;
/// Calls sent per pipeline, or in flight at once, while loading.
const BATCH: usize = 1000;

/// The book's layout in an emptied server.
pub async fn book(url: &str, options: &ConnectOptions, load: ViewedLoad) -> Result<ViewedRun> {
    let mut conn = sessionpack::connect_with(url, options).await?;
    let empty = settled_sample(&mut conn).await?;
    let tokens: Vec<String> = (0..load.sessions)
        .map(|_| SessionId::generate().map(|id| id.to_hex()))
        .collect::<Result<_>>()?;
    let now = sessionpack::clock::unix_now();
    for (start, chunk) in tokens.chunks(BATCH).enumerate() {
        let mut pipe = redis::pipe();
        for (i, token) in chunk.iter().enumerate() {
            let user = (start * BATCH + i) as u64;
            pipe.hset("login:", token, user)
                .ignore()
                .zadd("recent:", token, now)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await?;
    }
    let sessions = settled_sample(&mut conn).await?;
    let mut rng = rand::rng();
    for chunk in tokens.chunks(BATCH / usize::from(load.keep).max(1)) {
        let mut pipe = redis::pipe();
        for token in chunk {
            let members: Vec<(u64, u64)> = (0..u64::from(load.keep))
                .map(|k| (now + k, rng.random_range(0..load.catalogue)))
                .collect();
            pipe.zadd_multiple(format!("viewed:{token}"), &members)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await?;
    }
    let full = settled_sample(&mut conn).await?;
    let (list_keys, converted) = encodings(
        &mut conn,
        tokens.iter().map(|t| format!("viewed:{t}")),
        "listpack",
    )
    .await?;
    let tokens = Arc::new(tokens);
    let (views_per_sec, cpu) = drive(&mut conn, load, {
        let tokens = tokens.clone();
        move |mut c: redis::aio::ConnectionManager, session: usize, item: u64| {
            let token = tokens[session].clone();
            async move {
                let at = sessionpack::clock::unix_now();
                let key = format!("viewed:{token}");
                let _: () = redis::pipe()
                    .hset("login:", &token, session)
                    .ignore()
                    .zadd("recent:", &token, at)
                    .ignore()
                    .zadd(&key, item, at)
                    .ignore()
                    .cmd("ZREMRANGEBYRANK")
                    .arg(&key)
                    .arg(0)
                    .arg(-(i64::from(load.keep) + 1))
                    .ignore()
                    .query_async(&mut c)
                    .await?;
                Ok(true)
            }
        }
    })
    .await?;
    let destroyed = each_session(&mut conn, load, {
        let tokens = tokens.clone();
        move |mut c: redis::aio::ConnectionManager, session: usize| {
            let token = tokens[session].clone();
            async move {
                let (gone,): (u64,) = redis::pipe()
                    .del(format!("viewed:{token}"))
                    .ignore()
                    .hdel("login:", &token)
                    .zrem("recent:", &token)
                    .ignore()
                    .query_async(&mut c)
                    .await?;
                Ok(gone == 1)
            }
        }
    })
    .await?;
    Ok(ViewedRun::new(
        "book (ZSET per session)".into(),
        load,
        [&empty, &sessions, &full],
        (list_keys, converted),
        (views_per_sec, cpu),
        destroyed,
    ))
}

/// The packed layout: a compact store of `2^bits` buckets keeping the
/// newest `keep` items of up to 8 bytes.
pub async fn packed(
    url: &str,
    options: &ConnectOptions,
    load: ViewedLoad,
    bits: u8,
) -> Result<ViewedRun> {
    let mut conn = sessionpack::connect_with(url, options).await?;
    let config = CompactConfig::new(bits).with_viewed(ViewedConfig::new(load.keep, 8));
    let layout = Compact::new(conn.clone(), config).await?;
    let store: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(TTL_SECS));
    let empty = settled_sample(&mut conn).await?;
    let mut ids = Vec::with_capacity(load.sessions as usize);
    for start in (0..load.sessions).step_by(BATCH) {
        let batch: Vec<(u64, ())> = (start..(start + BATCH as u64).min(load.sessions))
            .map(|user| (user, ()))
            .collect();
        ids.extend(store.create_many(&batch).await?);
    }
    let sessions = settled_sample(&mut conn).await?;
    let store = Arc::new(store);
    for chunk in ids.chunks(BATCH) {
        let calls: Vec<_> = chunk
            .iter()
            .map(|&id| {
                let store = store.clone();
                let mut rng = rand::rng();
                let items: Vec<u64> = (0..load.keep)
                    .map(|_| rng.random_range(0..load.catalogue))
                    .collect();
                tokio::spawn(async move { store.view_many(&id, &items).await })
            })
            .collect();
        for call in calls {
            let found = call.await.map_err(|e| Error::Config(e.to_string()))??;
            if found.is_none() {
                return Err(Error::Config("a loaded session was gone".into()));
            }
        }
    }
    let full = settled_sample(&mut conn).await?;
    let keys = (0..layout.buckets().count()).flat_map(|b| layout.viewed_keys(b));
    let (list_keys, converted) = encodings(&mut conn, keys, "listpack").await?;
    let ids = Arc::new(ids);
    let (views_per_sec, cpu) = drive(&mut conn, load, {
        let (store, ids) = (store.clone(), ids.clone());
        move |_: redis::aio::ConnectionManager, session: usize, item: u64| {
            let store = store.clone();
            let id = ids[session];
            async move { Ok(store.view(&id, &item).await?.is_some()) }
        }
    })
    .await?;
    let destroyed = each_session(&mut conn, load, {
        let store = store.clone();
        let ids = ids.clone();
        move |_: redis::aio::ConnectionManager, session: usize| {
            let store = store.clone();
            let id = ids[session];
            async move { store.destroy(&id).await }
        }
    })
    .await?;
    Ok(ViewedRun::new(
        format!("packed 2^{bits}"),
        load,
        [&empty, &sessions, &full],
        (list_keys, converted),
        (views_per_sec, cpu),
        destroyed,
    ))
}

impl ViewedRun {
    fn new(
        layout: String,
        load: ViewedLoad,
        [empty, sessions, full]: [&MemorySample; 3],
        (list_keys, list_keys_converted): (u64, u64),
        (views_per_sec, server_cpu_us_per_view): (f64, f64),
        (destroys, server_cpu_us_per_destroy): (u64, f64),
    ) -> Self {
        let per = |after: u64, before: u64| {
            after.saturating_sub(before) as f64 / load.sessions.max(1) as f64
        };
        Self {
            layout,
            sessions: load.sessions,
            items: u64::from(load.keep),
            session_bytes: per(sessions.used_memory, empty.used_memory),
            item_bytes: per(full.used_memory, sessions.used_memory),
            // Signed: RSS can fall below the empty server's.
            rss_per_session: (full.used_memory_rss as f64 - empty.used_memory_rss as f64)
                / load.sessions.max(1) as f64,
            list_keys,
            list_keys_converted,
            views: load.views,
            views_per_sec,
            server_cpu_us_per_view,
            destroys,
            server_cpu_us_per_destroy,
        }
    }
}

/// How many of `keys` exist, and how many of those are not `encoding`.
async fn encodings(
    conn: &mut redis::aio::ConnectionManager,
    keys: impl Iterator<Item = String>,
    encoding: &str,
) -> Result<(u64, u64)> {
    let keys: Vec<String> = keys.collect();
    let (mut found, mut other) = (0, 0);
    for chunk in keys.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("OBJECT").arg("ENCODING").arg(key);
        }
        let replies: Vec<Option<String>> = pipe.query_async(conn).await?;
        for reply in replies.into_iter().flatten() {
            found += 1;
            other += u64::from(reply != encoding);
        }
    }
    Ok((found, other))
}

/// Makes `load.views` views of random items on random sessions with
/// `load.clients` callers, each calling `view` in turn; views per second
/// and server CPU µs per view.
async fn drive<F, Fut>(
    conn: &mut redis::aio::ConnectionManager,
    load: ViewedLoad,
    view: F,
) -> Result<(f64, f64)>
where
    F: Fn(redis::aio::ConnectionManager, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool>> + Send + 'static,
{
    let clients = load.clients.max(1);
    let per_client = load.views / clients as u64;
    let cpu_before = server_cpu_secs(conn).await?;
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let view = view.clone();
            let conn = conn.clone();
            tokio::spawn(async move {
                for _ in 0..per_client {
                    let (session, item) = {
                        let mut rng = rand::rng();
                        (
                            rng.random_range(0..load.sessions as usize),
                            rng.random_range(0..load.catalogue),
                        )
                    };
                    if !view(conn.clone(), session, item).await? {
                        return Err(Error::Config("a viewed session was gone".into()));
                    }
                }
                Ok::<(), Error>(())
            })
        })
        .collect();
    for w in workers {
        w.await.map_err(|e| Error::Config(e.to_string()))??;
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = server_cpu_secs(conn).await? - cpu_before;
    let n = (per_client * clients as u64).max(1) as f64;
    Ok((n / took.max(1e-9), cpu * 1e6 / n))
}

/// Destroys every session once (at most `load.views` of them) with
/// `load.clients` callers, each taking every `clients`-th; how many, and
/// server CPU µs per destroy. A destroy that finds no session voids the run.
async fn each_session<F, Fut>(
    conn: &mut redis::aio::ConnectionManager,
    load: ViewedLoad,
    destroy: F,
) -> Result<(u64, f64)>
where
    F: Fn(redis::aio::ConnectionManager, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool>> + Send + 'static,
{
    let n = load.sessions.min(load.views.max(1)) as usize;
    let clients = load.clients.max(1);
    let cpu_before = server_cpu_secs(conn).await?;
    let workers: Vec<_> = (0..clients)
        .map(|first| {
            let destroy = destroy.clone();
            let conn = conn.clone();
            tokio::spawn(async move {
                for session in (first..n).step_by(clients) {
                    if !destroy(conn.clone(), session).await? {
                        return Err(Error::Config("a destroyed session was gone".into()));
                    }
                }
                Ok::<(), Error>(())
            })
        })
        .collect();
    for w in workers {
        w.await.map_err(|e| Error::Config(e.to_string()))??;
    }
    let cpu = server_cpu_secs(conn).await? - cpu_before;
    Ok((n as u64, cpu * 1e6 / n.max(1) as f64))
}
