//! The throughput benchmark: operations per second per layout on one
//! server, beside `redis-benchmark`'s plain SET on the same server in the
//! same run, so every figure is also a ratio.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::info::server_cpu_secs;
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::layout::{Layout, LayoutKind};
use crate::store::Store;

/// Sessions per batched call.
pub const BATCH: usize = 1000;

/// One measured operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// `Store::create`, one call per session.
    Create,
    /// `Store::load`.
    Load,
    /// `Store::touch`.
    Touch,
    /// `Store::create_many`, [`BATCH`] at a time.
    CreateBatch,
    /// `Store::load_many`, [`BATCH`] at a time.
    LoadBatch,
}

impl Op {
    /// Every operation.
    pub const ALL: [Self; 5] = [
        Self::Create,
        Self::Load,
        Self::Touch,
        Self::CreateBatch,
        Self::LoadBatch,
    ];

    /// Its report name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Load => "load",
            Self::Touch => "touch",
            Self::CreateBatch => "create (batch)",
            Self::LoadBatch => "load (batch)",
        }
    }

    /// Whether it is batched (compared with pipelined SET).
    pub fn is_batched(self) -> bool {
        matches!(self, Self::CreateBatch | Self::LoadBatch)
    }
}

/// One layout's rate for one operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rate {
    /// The layout's label.
    pub layout: String,
    /// The operation.
    pub op: Op,
    /// Sessions per second.
    pub ops_per_sec: f64,
    /// Redis server CPU (user + sys, `INFO cpu` delta) per session, in
    /// microseconds.
    #[serde(default)]
    pub server_cpu_us: f64,
}

/// `redis-benchmark -t set` on the same server: one request at a time per
/// client, and pipelined.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SetBaseline {
    /// Requests per second with `-P 1`.
    pub single: f64,
    /// Requests per second with `-P <batch>`.
    pub pipelined: f64,
}

/// Runs `redis-benchmark -t set` against `port`.
pub fn redis_benchmark_set(
    port: u16,
    clients: usize,
    pipeline: usize,
    requests: u64,
) -> Result<f64> {
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "set",
            "-q",
        ])
        .args([
            "-c",
            &clients.to_string(),
            "-P",
            &pipeline.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args(["-r", "1000000", "-d", "8"])
        .output()
        .map_err(|e| {
            Error::Config(format!(
                "cannot run redis-benchmark (apt-get install redis-tools): {e}"
            ))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "SET: 123456.79 requests per second, p50=0.215 msec"
    text.split(['\r', '\n'])
        .filter_map(|line| line.trim().strip_prefix("SET: "))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|n| n.parse::<f64>().ok())
        .next_back()
        .ok_or_else(|| Error::Config(format!("unexpected redis-benchmark output: {text}")))
}

/// Measures `ops` on one layout: `clients` concurrent callers for single
/// operations, each batch call for batched ones, `sessions` sessions per op.
/// `probe` is a separate connection to the same server, for `INFO cpu`.
pub async fn measure<L, P>(
    label: &str,
    store: Store<L, ()>,
    clients: usize,
    sessions: usize,
    probe: &mut P,
) -> Result<Vec<Rate>>
where
    L: Layout + 'static,
    P: redis::aio::ConnectionLike + Send,
{
    let store = std::sync::Arc::new(store);
    let mut rates = Vec::new();
    let identities: Vec<(u64, ())> = (0..sessions as u64).map(|i| (1 << 20 | i, ())).collect();

    // Batched create also seeds the sessions the other operations use.
    let cpu = server_cpu_secs(probe).await?;
    let started = Instant::now();
    let mut ids = Vec::with_capacity(sessions);
    for chunk in identities.chunks(BATCH) {
        ids.extend(store.create_many(chunk).await?);
    }
    let took = started.elapsed();
    let cpu = server_cpu_secs(probe).await? - cpu;
    rates.push(rate(label, Op::CreateBatch, sessions, took, cpu));

    let cpu = server_cpu_secs(probe).await?;
    let started = Instant::now();
    for chunk in ids.chunks(BATCH) {
        let found = store.load_many(chunk).await?;
        if found.iter().any(Option::is_none) {
            return Err(Error::Config(format!(
                "{label}: a session created moments ago is missing"
            )));
        }
    }
    let took = started.elapsed();
    let cpu = server_cpu_secs(probe).await? - cpu;
    rates.push(rate(label, Op::LoadBatch, sessions, took, cpu));

    for op in [Op::Create, Op::Load, Op::Touch] {
        let cpu = server_cpu_secs(probe).await?;
        let started = Instant::now();
        let per_client = sessions / clients;
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..clients {
            let store = store.clone();
            let mine: Vec<SessionId> = ids[c * per_client..(c + 1) * per_client].to_vec();
            tasks.spawn(async move {
                for id in mine {
                    let found = match op {
                        Op::Create => store.create(1 << 20, ()).await.map(|_| true)?,
                        Op::Load => store.load(&id).await?.is_some(),
                        _ => store.touch(&id).await?.is_some(),
                    };
                    if !found {
                        return Err(Error::Config(format!(
                            "{op:?}: a live session was not found"
                        )));
                    }
                }
                Ok::<_, Error>(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| Error::Config(format!("benchmark task failed: {e}")))??;
        }
        let took = started.elapsed();
        let cpu = server_cpu_secs(probe).await? - cpu;
        rates.push(rate(label, op, per_client * clients, took, cpu));
    }
    Ok(rates)
}

fn rate(label: &str, op: Op, n: usize, took: Duration, cpu_secs: f64) -> Rate {
    Rate {
        layout: label.to_owned(),
        op,
        ops_per_sec: n as f64 / took.as_secs_f64().max(1e-9),
        server_cpu_us: cpu_secs * 1e6 / n.max(1) as f64,
    }
}

/// The median rate of each (layout, operation) over rounds, in first-seen
/// order.
pub fn medians(all: &[Rate]) -> Vec<Rate> {
    let mut out: Vec<Rate> = Vec::new();
    for r in all {
        if out.iter().any(|o| o.layout == r.layout && o.op == r.op) {
            continue;
        }
        let mut v: Vec<f64> = all
            .iter()
            .filter(|o| o.layout == r.layout && o.op == r.op)
            .map(|o| o.ops_per_sec)
            .collect();
        v.sort_by(f64::total_cmp);
        let mut cpu: Vec<f64> = all
            .iter()
            .filter(|o| o.layout == r.layout && o.op == r.op)
            .map(|o| o.server_cpu_us)
            .collect();
        cpu.sort_by(f64::total_cmp);
        out.push(Rate {
            layout: r.layout.clone(),
            op: r.op,
            ops_per_sec: median_of(&v),
            server_cpu_us: median_of(&cpu),
        });
    }
    out
}

/// The median of sorted values.
fn median_of(v: &[f64]) -> f64 {
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// A whole throughput run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThroughputReport {
    /// The command line that produced it.
    pub command: String,
    /// The server measured, e.g. `Redis 7.0.15` (name and version; older
    /// reports hold the version alone).
    pub redis_version: String,
    /// Concurrent callers for single operations.
    pub clients: usize,
    /// Sessions per operation and layout.
    pub sessions: usize,
    /// redis-benchmark's SET rates (medians over rounds).
    pub set_baseline: SetBaseline,
    /// Rounds run; in each, every layout is measured in turn.
    pub rounds: usize,
    /// The median rate of each layout and operation over the rounds.
    pub rates: Vec<Rate>,
    /// Every rate measured, round by round.
    pub all_rates: Vec<Rate>,
    /// The layouts, in order.
    pub layouts: Vec<LayoutKind>,
}

impl ThroughputReport {
    /// A markdown table: ops/s, ratio to SET, ratio to packed-setex.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| layout | operation | sessions/s | vs redis-benchmark SET | vs packed-setex | server CPU µs/op | CPU vs packed-setex |\n|---|---|---:|---:|---:|---:|---:|"
        );
        for r in &self.rates {
            let set = if r.op.is_batched() {
                self.set_baseline.pipelined
            } else {
                self.set_baseline.single
            };
            let packed = self
                .rates
                .iter()
                .find(|p| p.op == r.op && p.layout == LayoutKind::PackedSetex.name());
            let speed = packed
                .map(|p| format!("{:.2}x", r.ops_per_sec / p.ops_per_sec))
                .unwrap_or_default();
            let cpu = packed
                .map(|p| format!("{:.2}x", r.server_cpu_us / p.server_cpu_us))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.2}x | {} | {:.2} | {} |",
                r.layout,
                r.op.name(),
                r.ops_per_sec,
                r.ops_per_sec / set,
                speed,
                r.server_cpu_us,
                cpu
            );
        }
        s
    }
}
