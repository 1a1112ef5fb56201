//! One-time tokens, packed ([`sessionpack::tokens`]) against the talk's key per
//! token (`SETEX code:<token> <json>`, consumed with `MULTI` `GET` `DEL`):
//! bytes per token, and consumes per second with the server's CPU per
//! consume.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::info::{MemorySample, server_cpu_secs, settled_sample};
use sessionpack::conn::ConnectOptions;
use sessionpack::error::{Error, Result};
use sessionpack::session::id::{IdWidth, SessionId};
use sessionpack::tokens::Tokens;

/// A token's payload, as the talk's example has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verify {
    /// The account.
    pub act_id: String,
    /// The address to verify.
    pub email: String,
}

impl Verify {
    /// The `n`th token's payload.
    pub fn nth(n: u64) -> Self {
        Self {
            act_id: (1_000 + n).to_string(),
            email: format!("user{n}@example.org"),
        }
    }
}

/// What one layout measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TokenRun {
    /// `setex` (the talk's) or `packed 2^B`.
    pub layout: String,
    /// Tokens loaded.
    pub tokens: u64,
    /// `used_memory` delta over the empty server, per token.
    pub bytes_per_token: f64,
    /// RSS delta per token.
    pub rss_per_token: f64,
    /// Tokens consumed per second by the callers (each consume once).
    pub consumes_per_sec: f64,
    /// Server CPU per consume, µs (`INFO cpu` delta / consumes).
    pub server_cpu_us_per_consume: f64,
    /// Consumes that found their token (all of them, or the run is void).
    pub consumed: u64,
}

/// A lifetime no token outlives during a run.
const TTL_SECS: u64 = 3600;
/// Tokens sent per pipeline.
const BATCH: usize = 1000;

/// Loads `n` tokens the talk's way into an emptied server, measures, then
/// consumes `consume` of them with `clients` callers.
pub async fn setex(
    url: &str,
    options: &ConnectOptions,
    n: u64,
    consume: u64,
    clients: usize,
) -> Result<TokenRun> {
    let mut conn = sessionpack::connect_with(url, options).await?;
    let empty = settled_sample(&mut conn).await?;
    let mut tokens = Vec::with_capacity(n as usize);
    for start in (0..n).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in start..(start + BATCH as u64).min(n) {
            let token = SessionId::generate_with(IdWidth::Bits128)?;
            let json =
                serde_json::to_string(&Verify::nth(i)).map_err(|e| Error::Config(e.to_string()))?;
            pipe.set_ex(format!("code:{}", token.to_hex()), json, TTL_SECS)
                .ignore();
            tokens.push(token);
        }
        let _: () = pipe.query_async(&mut conn).await?;
    }
    let full = settled_sample(&mut conn).await?;
    let consumer = |token: SessionId, mut c: redis::aio::ConnectionManager| async move {
        let key = format!("code:{}", token.to_hex());
        let (json, _): (Option<String>, i64) = redis::pipe()
            .atomic()
            .get(&key)
            .del(&key)
            .query_async(&mut c)
            .await?;
        Ok(json.is_some())
    };
    let consumed = consume_all(&mut conn, &tokens[..consume as usize], clients, consumer).await?;
    Ok(TokenRun::new(
        "setex (the talk's)".into(),
        n,
        &empty,
        &full,
        consumed,
    ))
}

/// The same, packed in `2^bits` buckets.
pub async fn packed(
    url: &str,
    options: &ConnectOptions,
    n: u64,
    bits: u8,
    consume: u64,
    clients: usize,
) -> Result<TokenRun> {
    let mut conn = sessionpack::connect_with(url, options).await?;
    let store: Tokens<_, Verify> = Tokens::open(conn.clone(), bits).await?;
    let empty = settled_sample(&mut conn).await?;
    let mut tokens = Vec::with_capacity(n as usize);
    for start in (0..n).step_by(BATCH) {
        let payloads: Vec<Verify> = (start..(start + BATCH as u64).min(n))
            .map(Verify::nth)
            .collect();
        tokens.extend(
            store
                .issue_many(&payloads, Duration::from_secs(TTL_SECS))
                .await?,
        );
    }
    let full = settled_sample(&mut conn).await?;
    let shared = Arc::new(store);
    let consumer = |token: SessionId, _: redis::aio::ConnectionManager| {
        let store = shared.clone();
        async move { Ok(store.consume(&token).await?.is_some()) }
    };
    let consumed = consume_all(&mut conn, &tokens[..consume as usize], clients, consumer).await?;
    Ok(TokenRun::new(
        format!("packed 2^{bits}"),
        n,
        &empty,
        &full,
        consumed,
    ))
}

impl TokenRun {
    /// A run of `n` tokens from the server's samples before and after
    /// loading them, and what consuming found (rate, CPU, found).
    fn new(
        layout: String,
        n: u64,
        empty: &MemorySample,
        full: &MemorySample,
        (consumes_per_sec, server_cpu_us_per_consume, consumed): (f64, f64, u64),
    ) -> Self {
        let per = |after: u64, before: u64| after.saturating_sub(before) as f64 / n.max(1) as f64;
        Self {
            layout,
            tokens: n,
            bytes_per_token: per(full.used_memory, empty.used_memory),
            rss_per_token: per(full.used_memory_rss, empty.used_memory_rss),
            consumes_per_sec,
            server_cpu_us_per_consume,
            consumed,
        }
    }
}

/// Consumes each of `tokens` once with `clients` concurrent callers;
/// consumes per second, server CPU µs per consume, and how many found
/// their token.
async fn consume_all<F, Fut>(
    conn: &mut redis::aio::ConnectionManager,
    tokens: &[SessionId],
    clients: usize,
    consume: F,
) -> Result<(f64, f64, u64)>
where
    F: Fn(SessionId, redis::aio::ConnectionManager) -> Fut,
    Fut: std::future::Future<Output = Result<bool>> + Send + 'static,
{
    let cpu_before = server_cpu_secs(conn).await?;
    let started = Instant::now();
    let mut found = 0u64;
    for chunk in tokens.chunks(clients.max(1)) {
        let calls: Vec<_> = chunk.iter().map(|t| consume(*t, conn.clone())).collect();
        for hit in futures_join(calls).await {
            found += u64::from(hit?);
        }
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = server_cpu_secs(conn).await? - cpu_before;
    let n = tokens.len().max(1) as f64;
    Ok((n / took.max(1e-9), cpu * 1e6 / n, found))
}

async fn futures_join<Fut>(calls: Vec<Fut>) -> Vec<Result<bool>>
where
    Fut: std::future::Future<Output = Result<bool>> + Send + 'static,
{
    let handles: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(
            h.await
                .unwrap_or_else(|e| Err(Error::Config(e.to_string()))),
        );
    }
    out
}
