//! Rate limits: bytes per client and server CPU per check for the talk's
//! exact log and the packed GCRA limiter, and how many requests each
//! admits in a window when a client bursts.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::info::{server_cpu_secs, settled_sample};
use sessionpack::error::Result;
use sessionpack::ratelimit::{Decision, Gcra, Limit, SlidingLog};

/// What one limiter measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LimiterRun {
    /// `log` (the talk's) or `gcra 2^B`.
    pub limiter: String,
    /// Clients loaded, each with a full window of requests.
    pub clients: u64,
    /// `used_memory` delta per client.
    pub bytes_per_client: f64,
    /// Checks per second while loading.
    pub checks_per_sec: f64,
    /// Server CPU per check, µs.
    pub server_cpu_us_per_check: f64,
    /// Under a burst of the limit at the start of each window and as many
    /// again spread over it: the most requests admitted in any one window
    /// (by the server's clock) ...
    pub most_in_a_window: usize,
    /// ... and per window on average.
    pub admitted_per_window: f64,
}

/// How a run checks one request.
pub enum Limiter<C> {
    /// The talk's exact log.
    Log(SlidingLog<C>),
    /// The packed GCRA limiter.
    Gcra(Gcra<C>),
}

impl<C> Limiter<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    async fn check(&self, client: &str) -> Result<Decision> {
        match self {
            Self::Log(l) => l.check(client).await,
            Self::Gcra(g) => g.check(client).await,
        }
    }
}

/// Loads `clients` clients, each making `limit.requests()` requests
/// (a full window), into an emptied server, and measures; then bursts one
/// client for `burst_windows` windows.
pub async fn run(
    conn: &mut redis::aio::ConnectionManager,
    name: String,
    limiter: Limiter<redis::aio::ConnectionManager>,
    limit: Limit,
    clients: u64,
    burst_windows: u32,
) -> Result<LimiterRun> {
    let empty = settled_sample(conn).await?;
    let cpu = server_cpu_secs(conn).await?;
    let started = Instant::now();
    let per = u64::from(limit.requests());
    // Four callers, each a quarter of the clients.
    for _ in 0..per {
        let quarter = |q: u64| {
            let limiter = &limiter;
            async move {
                for c in (q..clients).step_by(4) {
                    limiter.check(&format!("client-{c}")).await?;
                }
                Ok::<_, sessionpack::Error>(())
            }
        };
        let (a, b, c, d) = tokio::join!(quarter(0), quarter(1), quarter(2), quarter(3));
        a.and(b).and(c).and(d)?;
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = server_cpu_secs(conn).await? - cpu;
    let full = settled_sample(conn).await?;
    let checks = (clients * per) as f64;

    // Each window: the limit at once, then as many again spread evenly
    // over the window (a burst, then the steady rate).
    let window = limit.window();
    let spacing = window / limit.requests();
    let mut admitted = Vec::new();
    for _ in 0..burst_windows {
        let opened = Instant::now();
        for i in 0..2 * limit.requests() {
            if i >= limit.requests() {
                let due = spacing * (i - limit.requests() + 1);
                tokio::time::sleep(due.saturating_sub(opened.elapsed())).await;
            }
            let d = limiter.check("burst").await?;
            if d.allowed {
                admitted.push(d.at_ms);
            }
        }
        tokio::time::sleep(window.saturating_sub(opened.elapsed())).await;
    }
    let window_ms = window.as_millis() as u64;
    let most = admitted
        .iter()
        .map(|&t| {
            admitted
                .iter()
                .filter(|&&u| u + window_ms > t && u <= t)
                .count()
        })
        .max()
        .unwrap_or(0);
    Ok(LimiterRun {
        limiter: name,
        clients,
        bytes_per_client: full.used_memory.saturating_sub(empty.used_memory) as f64
            / clients.max(1) as f64,
        checks_per_sec: checks / took.max(1e-9),
        server_cpu_us_per_check: cpu * 1e6 / checks.max(1.0),
        most_in_a_window: most,
        admitted_per_window: admitted.len() as f64 / f64::from(burst_windows.max(1)),
    })
}
