//! The throughput benchmark: operations per second per layout on one
//! server or a cluster, beside `redis-benchmark`'s plain SET on the same
//! servers in the same run, so every figure is also a ratio; server CPU and
//! commands per operation, per primary on a cluster.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::nodes::{Nodes, Work, work_since};
use crate::baselines::LayoutKind;
use sessionpack::error::{Error, Result};
use sessionpack::session::id::SessionId;
use sessionpack::session::layout::Layout;
use sessionpack::session::store::{Session, Store};

/// Sessions per batched call.
pub const BATCH: usize = 1000;

/// How long each node's idle CPU rate is read before a layout's
/// operations.
pub const IDLE_WINDOW: Duration = Duration::from_secs(1);

/// The attributes of a session, by its number.
pub type Attrs<A> = std::sync::Arc<dyn Fn(u64) -> A + Send + Sync>;

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
    /// `Store::save`: new attributes for a live session, from a process
    /// that has not loaded it.
    Save,
    /// `Store::rotate`: a new id for a live session (with a user index,
    /// the successor recorded beside the old one first).
    Rotate,
    /// `Store::destroy` of the sessions `create` made.
    Destroy,
    /// `Store::create_many`, [`BATCH`] at a time.
    CreateBatch,
    /// `Store::load_many`, [`BATCH`] at a time.
    LoadBatch,
}

impl Op {
    /// Every operation.
    pub const ALL: [Self; 8] = [
        Self::Create,
        Self::Load,
        Self::Touch,
        Self::Save,
        Self::Rotate,
        Self::Destroy,
        Self::CreateBatch,
        Self::LoadBatch,
    ];

    /// Its report name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Load => "load",
            Self::Touch => "touch",
            Self::Save => "save",
            Self::Rotate => "rotate",
            Self::Destroy => "destroy",
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
    /// microseconds; on a cluster, summed over the primaries.
    #[serde(default)]
    pub server_cpu_us: f64,
    /// Each primary's share of `server_cpu_us`, in microseconds per
    /// session (one entry on a single server).
    #[serde(default)]
    pub node_cpu_us: Vec<f64>,
    /// Commands each primary processed per session.
    #[serde(default)]
    pub node_commands: Vec<f64>,
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

/// Runs `redis-benchmark -t set` against `port` (with `--cluster`, the
/// cluster that node belongs to).
pub fn redis_benchmark_set(
    port: u16,
    cluster: bool,
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
        .args(cluster.then_some("--cluster"))
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
/// `nodes` are the servers holding the data (a cluster's primaries), read
/// for CPU time and commands processed; each node's idle CPU rate, read
/// over [`IDLE_WINDOW`] first, is taken off for each operation's duration.
/// Sessions carry the attributes `attrs` gives for their number (a save
/// writes those of the next number).
pub async fn measure<L, A>(
    label: &str,
    store: Store<L, A>,
    attrs: Attrs<A>,
    clients: usize,
    sessions: usize,
    nodes: &mut Nodes,
) -> Result<Vec<Rate>>
where
    L: Layout + 'static,
    A: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let store = std::sync::Arc::new(store);
    let mut rates = Vec::new();
    let idle = nodes.idle_rates(IDLE_WINDOW).await?;
    let rate = |label: &str, op: Op, n: usize, took: Duration, work: &[Work]| {
        let busy: Vec<Work> = work
            .iter()
            .zip(&idle)
            .map(|(w, rate)| Work {
                cpu_secs: (w.cpu_secs - rate * took.as_secs_f64()).max(0.0),
                commands: w.commands,
            })
            .collect();
        rate(label, op, n, took, &busy)
    };
    let identities: Vec<(u64, A)> = (0..sessions as u64)
        .map(|i| (1 << 20 | i, attrs(i)))
        .collect();

    // Batched create also seeds the sessions the other operations use.
    let work = nodes.work().await?;
    let started = Instant::now();
    let mut ids = Vec::with_capacity(sessions);
    for chunk in identities.chunks(BATCH) {
        ids.extend(store.create_many(chunk).await?);
    }
    let took = started.elapsed();
    let work = work_since(&nodes.work().await?, &work);
    rates.push(rate(label, Op::CreateBatch, sessions, took, &work));

    let work = nodes.work().await?;
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
    let work = work_since(&nodes.work().await?, &work);
    rates.push(rate(label, Op::LoadBatch, sessions, took, &work));

    // Rotation last but one: it ends the ids the others use. Destroy
    // removes the sessions create made.
    let mut created: Vec<SessionId> = Vec::new();
    for op in [
        Op::Create,
        Op::Load,
        Op::Touch,
        Op::Save,
        Op::Rotate,
        Op::Destroy,
    ] {
        let work = nodes.work().await?;
        let started = Instant::now();
        let targets = if op == Op::Destroy { &created } else { &ids };
        let per_client = targets.len().min(sessions) / clients;
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..clients {
            let store = store.clone();
            let mine: Vec<SessionId> = targets[c * per_client..(c + 1) * per_client].to_vec();
            let first = (c * per_client) as u64;
            let attrs = attrs.clone();
            tasks.spawn(async move {
                let mut made = Vec::new();
                for (k, id) in (first..).zip(mine) {
                    let found = match op {
                        Op::Create => {
                            made.push(store.create(1 << 20 | k, attrs(k)).await?.id);
                            true
                        }
                        Op::Load => store.load(&id).await?.is_some(),
                        Op::Save => {
                            let session = Session {
                                id,
                                identity: 1 << 20 | k,
                                expires_at: 0,
                                attrs: attrs(k + 1),
                            };
                            store.save(&session).await?
                        }
                        Op::Rotate => store.rotate(&id).await?.is_some(),
                        Op::Destroy => store.destroy(&id).await?,
                        _ => store.touch(&id).await?.is_some(),
                    };
                    if !found {
                        return Err(Error::Config(format!(
                            "{op:?}: a live session was not found"
                        )));
                    }
                }
                Ok::<_, Error>(made)
            });
        }
        while let Some(done) = tasks.join_next().await {
            created
                .extend(done.map_err(|e| Error::Config(format!("benchmark task failed: {e}")))??);
        }
        let took = started.elapsed();
        let work = work_since(&nodes.work().await?, &work);
        rates.push(rate(label, op, per_client * clients, took, &work));
    }
    Ok(rates)
}

fn rate(label: &str, op: Op, n: usize, took: Duration, work: &[Work]) -> Rate {
    let per = |x: f64| x / n.max(1) as f64;
    Rate {
        layout: label.to_owned(),
        op,
        ops_per_sec: n as f64 / took.as_secs_f64().max(1e-9),
        server_cpu_us: per(work.iter().map(|w| w.cpu_secs).sum::<f64>() * 1e6),
        node_cpu_us: work.iter().map(|w| per(w.cpu_secs * 1e6)).collect(),
        node_commands: work.iter().map(|w| per(w.commands as f64)).collect(),
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
        let same: Vec<&Rate> = all
            .iter()
            .filter(|o| o.layout == r.layout && o.op == r.op)
            .collect();
        let median = |f: &dyn Fn(&Rate) -> Option<f64>| {
            let mut v: Vec<f64> = same.iter().filter_map(|o| f(o)).collect();
            v.sort_by(f64::total_cmp);
            median_of(&v)
        };
        let per_node = |f: &dyn Fn(&Rate) -> &Vec<f64>| {
            (0..f(r).len())
                .map(|i| median(&|o| f(o).get(i).copied()))
                .collect()
        };
        out.push(Rate {
            layout: r.layout.clone(),
            op: r.op,
            ops_per_sec: median(&|o| Some(o.ops_per_sec)),
            server_cpu_us: median(&|o| Some(o.server_cpu_us)),
            node_cpu_us: per_node(&|o| &o.node_cpu_us),
            node_commands: per_node(&|o| &o.node_commands),
        });
    }
    out
}

/// The median of sorted values (0 for none).
fn median_of(v: &[f64]) -> f64 {
    let mid = v.len() / 2;
    if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
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
    /// The servers holding the data: one, or a cluster's primaries.
    #[serde(default)]
    pub primaries: Vec<String>,
    /// How each layout's data spread over the primaries (last round).
    #[serde(default)]
    pub spread: Vec<Spread>,
    /// Replicas each write waited for, in the rows labelled with
    /// [`wait_label`].
    #[serde(default)]
    pub wait_replicas: Option<u32>,
}

/// How one layout's keys and memory spread over a cluster's primaries,
/// read after its operations ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spread {
    /// The layout's label.
    pub layout: String,
    /// Keys on each primary (`DBSIZE`): buckets x 2 for the bucketed
    /// layouts, sessions for key-per-session.
    pub keys: Vec<u64>,
    /// Each primary's `used_memory` less what it used empty.
    pub used_memory: Vec<u64>,
}

/// The label of `label`'s rows measured with every write waiting for
/// `replicas` replicas (`WAIT`).
pub fn wait_label(label: &str, replicas: u32) -> String {
    format!("{label} + WAIT {replicas}")
}

/// How uneven `v` is: its largest value over its mean (1.00 = even).
pub fn max_over_mean(v: &[f64]) -> f64 {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = v.iter().copied().fold(0.0, f64::max);
    if mean > 0.0 { max / mean } else { 1.0 }
}

fn list(v: &[f64], digits: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(" / ")
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
            // Rows that waited for replicas compare with packed-setex's
            // that did.
            let packed_label = match self.wait_replicas {
                Some(n) if r.layout.ends_with(&wait_label("", n)) => {
                    wait_label(LayoutKind::PackedSetex.name(), n)
                }
                _ => LayoutKind::PackedSetex.name().to_owned(),
            };
            let packed = self
                .rates
                .iter()
                .find(|p| p.op == r.op && p.layout == packed_label);
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

    /// On a cluster, a markdown table of each operation's server CPU and
    /// commands per primary, and one of each layout's keys and memory per
    /// primary; empty on one server.
    pub fn cluster_tables(&self) -> String {
        use std::fmt::Write as _;
        if self.primaries.len() < 2 {
            return String::new();
        }
        let mut s = format!(
            "Per primary ({}), in that order:\n\n| layout | operation | server CPU µs/op per primary | CPU max/mean | commands/op per primary |\n|---|---|---|---:|---|\n",
            self.primaries.join(", ")
        );
        for r in &self.rates {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} | {} |",
                r.layout,
                r.op.name(),
                list(&r.node_cpu_us, 2),
                max_over_mean(&r.node_cpu_us),
                list(&r.node_commands, 2),
            );
        }
        s += "\n| layout | keys per primary | keys max/mean | used_memory MiB per primary | memory max/mean |\n|---|---|---:|---|---:|\n";
        for sp in &self.spread {
            let keys: Vec<f64> = sp.keys.iter().map(|&k| k as f64).collect();
            let mem: Vec<f64> = sp
                .used_memory
                .iter()
                .map(|&m| m as f64 / (1024.0 * 1024.0))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {} | {:.2} |",
                sp.layout,
                list(&keys, 0),
                max_over_mean(&keys),
                list(&mem, 1),
                max_over_mean(&mem),
            );
        }
        s
    }

    /// With `--wait-replicas`, a markdown table of what waiting costs each
    /// layout and operation: rate and server CPU with `WAIT` over without,
    /// and the mean time one caller waits per operation.
    pub fn wait_table(&self) -> String {
        use std::fmt::Write as _;
        let Some(n) = self.wait_replicas else {
            return String::new();
        };
        let mut s = format!(
            "Every write followed by `WAIT {n}` against the same layout without it (mean time per call = callers / rate for one-at-a-time operations, the batch's for batches):\n\n| layout | operation | sessions/s without | with WAIT | rate with/without | ms per call without | with WAIT | server CPU with/without |\n|---|---|---:|---:|---:|---:|---:|---:|\n"
        );
        for r in &self.rates {
            let Some(w) = self
                .rates
                .iter()
                .find(|w| w.op == r.op && w.layout == wait_label(&r.layout, n))
            else {
                continue;
            };
            let per_call = |rate: &Rate| {
                // Sessions one call carries, over the rate one caller sees.
                let sessions = if r.op.is_batched() {
                    BATCH as f64
                } else {
                    self.clients as f64
                };
                1e3 * sessions / rate.ops_per_sec.max(1e-9)
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {:.2}x | {:.3} | {:.3} | {:.2}x |",
                r.layout,
                r.op.name(),
                r.ops_per_sec,
                w.ops_per_sec,
                w.ops_per_sec / r.ops_per_sec.max(1e-9),
                per_call(r),
                per_call(w),
                w.server_cpu_us / r.server_cpu_us.max(1e-9),
            );
        }
        s
    }
}
