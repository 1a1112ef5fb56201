//! The memory benchmark: load N sessions layout by layout, in steps, and
//! record `used_memory`, RSS, fragmentation, key count and an encoding
//! census at each step.

use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::info::{MemorySample, ServerInfo};
use super::nodes::Nodes;
pub use super::user_load::UserIndexSpec;
use super::user_load::{self, Users};
use crate::baselines::{AnyLayout, LayoutKind};
use sessionpack::conn::{ConnectOptions, Endpoint};
use sessionpack::error::{Error, Result};
pub use sessionpack::identity::Form as IdentityForm;
use sessionpack::identity::Identity;
use sessionpack::session::buckets::Buckets;
use sessionpack::session::id::{IdWidth, SessionId};
use sessionpack::session::layout::Layout;
use sessionpack::session::record;
use sessionpack::users::{UserIndex, UserIndexConfig};

/// Sessions handed to the layout's batch insert at a time.
const BATCH: usize = 8192;
/// Buckets whose encoding is checked at an intermediate step when there are
/// too many to check them all (the last step always checks all).
const CENSUS_SAMPLE: u32 = 8192;
/// Longest wait for rehashing to finish before a sample: Redis's cron
/// rehashes a millisecond per tick, so a dict of 10M keys takes minutes.
const SETTLE_MAX: Duration = Duration::from_secs(600);
/// Identities start here so every record has the same size (a 32-bit
/// MessagePack integer: 5 bytes), as a real user-id space would.
pub const FIRST_IDENTITY: u64 = sessionpack::identity::FIRST_INT;

/// One layout (and bucket count) to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The layout.
    pub layout: LayoutKind,
    /// log2 of the bucket count (bucketed layout only).
    pub bucket_bits: Option<u8>,
    /// The population emulated: sessions are confined to
    /// `sessions / emulated` of the buckets so each holds what it would at
    /// this size (bucketed layout only).
    pub emulated_sessions: Option<u64>,
    /// Bits in a session id (the bucketed layouts; others store any id).
    #[serde(default = "default_id_bits")]
    pub id_bits: u16,
    /// The form of the sessions' identities.
    #[serde(default)]
    pub identity: IdentityForm,
    /// A per-user index loaded beside the sessions.
    #[serde(default)]
    pub users: UserIndexSpec,
    /// Consecutive sessions given to each user (1: a user per session).
    #[serde(default = "one")]
    pub sessions_per_user: u32,
}

fn one() -> u32 {
    1
}

fn default_id_bits() -> u16 {
    IdWidth::default().bits()
}

impl RunSpec {
    /// A label such as `bucketed 2^16` or `bucketed 2^20 (emulating 100M)`.
    pub fn label(&self) -> String {
        let mut label = self.layout.name().to_owned();
        if let Some(bits) = self.bucket_bits {
            label += &format!(" 2^{bits}");
        }
        if self.id_bits != default_id_bits() {
            label += &format!(" {}-bit ids", self.id_bits);
        }
        match self.identity {
            IdentityForm::Int => {}
            IdentityForm::Uuid => label += " uuid identities",
            IdentityForm::Name(n) => label += &format!(" {n}-byte name identities"),
        }
        label += &self.users.label();
        if self.users != UserIndexSpec::None && self.sessions_per_user != 1 {
            label += &format!(", {} sessions/user", self.sessions_per_user);
        }
        if let Some(n) = self.emulated_sessions {
            label += &format!(" (emulating {})", human_count(n));
        }
        label
    }
}

/// `100M`, `1.5M`, `20k`.
pub fn human_count(n: u64) -> String {
    let (v, unit) = match n {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "G"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "M"),
        n if n >= 1_000 => (n as f64 / 1e3, "k"),
        n => return n.to_string(),
    };
    let text = format!("{v:.1}");
    format!("{}{unit}", text.trim_end_matches(".0"))
}

/// How many bucket keys have left listpack.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Census {
    /// Buckets (HASH + ZSET pairs) that hold sessions.
    pub buckets: u64,
    /// Of those, how many have a HASH or ZSET that is no longer a listpack
    /// (estimated from a sample when `sampled`).
    pub converted: u64,
    /// HASH keys converted to hashtable.
    pub hashes_converted: u64,
    /// ZSET keys converted to skiplist.
    pub zsets_converted: u64,
    /// Whether this is an estimate from a random sample of buckets.
    pub sampled: bool,
}

/// The measurement after one step.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Point {
    /// Sessions loaded so far.
    pub sessions: u64,
    /// `used_memory` minus the empty server's: everything that grew,
    /// [`Point::not_sessions`] included.
    pub used_memory_delta: u64,
    /// Of [`Point::used_memory_delta`], what replication grew by (the
    /// primaries' backlogs and the replicas' output buffers): the
    /// server's, whatever it stores, so not counted as the sessions'.
    #[serde(default)]
    pub not_sessions: u64,
    /// `used_memory_rss` minus the empty server's; negative on a server
    /// whose RSS held memory freed before the run (RSS then says nothing
    /// of the sessions).
    pub rss_delta: i64,
    /// `(used_memory_delta - not_sessions) / sessions`: what the sessions
    /// cost.
    pub bytes_per_session: f64,
    /// `rss_delta / sessions` (negative when `rss_delta` is).
    pub rss_per_session: f64,
    /// The raw figures.
    pub sample: MemorySample,
    /// Encoding census (layouts with HASH/ZSET containers only).
    pub census: Option<Census>,
    /// Encoding census of the packed user index's buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_census: Option<Census>,
    /// Whether the key dicts had finished rehashing when sampled (false:
    /// the sample includes a second, transient table).
    #[serde(default = "settled_default")]
    pub settled: bool,
}

fn settled_default() -> bool {
    true
}

/// All measurements of one [`RunSpec`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// What was run.
    pub spec: RunSpec,
    /// Its label.
    pub label: String,
    /// The empty server's figures.
    pub empty: MemorySample,
    /// One point per step.
    pub points: Vec<Point>,
    /// Sessions per second while loading (measurement pauses excluded).
    pub load_rate: f64,
}

impl RunResult {
    /// The last point.
    pub fn last(&self) -> Option<&Point> {
        self.points.last()
    }
}

/// Progress callbacks, so the CLI can draw bars and the library stays quiet.
pub trait Progress {
    /// A run starts.
    fn start(&mut self, spec: &RunSpec, sessions: u64);
    /// `n` more sessions are loaded.
    fn advance(&mut self, n: u64);
    /// The run is done.
    fn finish(&mut self, result: &RunResult);
}

/// No progress output.
impl Progress for () {
    fn start(&mut self, _: &RunSpec, _: u64) {}
    fn advance(&mut self, _: u64) {}
    fn finish(&mut self, _: &RunResult) {}
}

/// Loads `sessions` sessions for `spec` into an emptied server (or
/// cluster) in `steps` steps, measuring after each; on a cluster, memory is
/// the sum over its primaries.
pub async fn run(
    endpoint: &Endpoint,
    options: &ConnectOptions,
    spec: RunSpec,
    sessions: u64,
    steps: u32,
    ttl_secs: u64,
    progress: &mut dyn Progress,
) -> Result<RunResult> {
    let nodes = Nodes::connect(&endpoint.primaries(options).await?, options).await?;
    let conn = endpoint.connect_with(options).await?;
    run_on(conn, nodes, spec, sessions, steps, ttl_secs, progress).await
}

async fn run_on<C>(
    conn: C,
    mut nodes: Nodes,
    spec: RunSpec,
    sessions: u64,
    steps: u32,
    ttl_secs: u64,
    progress: &mut dyn Progress,
) -> Result<RunResult>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    nodes.flush().await?;
    let mut conn = conn;
    let bits = spec.bucket_bits.unwrap_or(16);
    let width = IdWidth::from_bits(spec.id_bits)
        .ok_or_else(|| Error::Config(format!("ids have 128 or 160 bits, not {}", spec.id_bits)))?;
    let mut layout = spec.layout.open_with(conn.clone(), bits, width).await?;
    let index = match (spec.users, &mut layout) {
        (UserIndexSpec::Packed { bits: index_bits }, AnyLayout::Compact(c)) => {
            let config = UserIndexConfig::new(index_bits.unwrap_or(bits));
            let index = UserIndex::new(c.buckets().namespace(), config)?;
            *c = c.clone().with_users(Some(index.clone()));
            Some(index)
        }
        (UserIndexSpec::Packed { .. }, _) => {
            return Err(Error::Config(
                "the packed user index is the compact layout's".into(),
            ));
        }
        _ => None,
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The empty store, opened: what opening costs (its metadata key, the
    // configuration reads) is the store's, not the sessions'.
    let empty = nodes.sample().await?;
    let buckets = match &layout {
        AnyLayout::Bucketed(b) => Some(b.buckets().clone()),
        AnyLayout::Compact(c) => Some(c.buckets().clone()),
        _ => None,
    };
    // Emulation confines ids to the first `used` buckets.
    let used_buckets = match (&buckets, spec.emulated_sessions) {
        (Some(b), Some(total)) if total > sessions => {
            let share = sessions as f64 / total as f64;
            Some(((f64::from(b.count()) * share).round() as u32).max(1))
        }
        _ => None,
    };

    // Emulation confines users to the same share of the index's buckets.
    let used_index_buckets = match (&index, used_buckets, &buckets) {
        (Some(i), Some(used), Some(b)) => {
            let share = f64::from(used) / f64::from(b.count());
            Some(((f64::from(i.count()) * share).round() as u32).max(1))
        }
        _ => None,
    };
    let mut users = Users::new(
        spec.identity,
        spec.sessions_per_user,
        index.clone().zip(used_index_buckets),
    );

    progress.start(&spec, sessions);
    let mut loaded = 0u64;
    let mut loading = Duration::ZERO;
    let mut points = Vec::with_capacity(steps as usize);
    for step in 1..=u64::from(steps) {
        let target = sessions * step / u64::from(steps);
        let started = Instant::now();
        while loaded < target {
            let n = (target - loaded).min(2 * BATCH as u64) as usize;
            // An indexed store's ids carry the server's time.
            let stamp = match index {
                Some(_) => {
                    let (secs, _): (u32, u32) =
                        redis::cmd("TIME").query_async(&mut conn.clone()).await?;
                    Some(secs)
                }
                None => None,
            };
            let owners: Vec<Identity> = (0..n).map(|_| users.next_session()).collect();
            let batch = make_batch(&owners, width, stamp, buckets.as_ref(), used_buckets)?;
            let (a, b) = batch.split_at(batch.len() / 2);
            let (ra, rb) = tokio::join!(
                layout.insert_many(a, ttl_secs),
                layout.insert_many(b, ttl_secs)
            );
            check_inserted(ra?)?;
            check_inserted(rb?)?;
            if spec.users == UserIndexSpec::SetPerUser {
                let items: Vec<(SessionId, Identity)> =
                    batch.iter().map(|(id, _)| *id).zip(owners).collect();
                user_load::add_to_sets(&conn, &items).await?;
            }
            loaded += n as u64;
            progress.advance(n as u64);
        }
        loading += started.elapsed();
        // A dict that just doubled holds both tables until incremental
        // rehashing ends, which the server's cron finishes while idle.
        // Sample the steady state, not that transient.
        let settled = nodes.settle(SETTLE_MAX).await?;
        let sample = nodes.sample().await?;
        let census = match (&layout, &buckets) {
            (AnyLayout::Bucketed(_), Some(b)) => {
                let last = step == u64::from(steps);
                let keys = |bucket| vec![b.hash_key(bucket), b.zset_key(bucket)];
                let used = used_buckets.unwrap_or(b.count());
                Some(bucket_census(&mut conn, &keys, used, last).await?)
            }
            (AnyLayout::Compact(c), Some(b)) => {
                let last = step == u64::from(steps);
                let keys = |bucket| vec![c.scheme().bucket_key(bucket)];
                let used = used_buckets.unwrap_or(b.count());
                Some(bucket_census(&mut conn, &keys, used, last).await?)
            }
            (AnyLayout::Book(book), _) => {
                Some(book_census(&mut conn, book.login_key(), book.recent_key()).await?)
            }
            _ => None,
        };
        let index_census = match &index {
            Some(i) => {
                let last = step == u64::from(steps);
                let keys = |bucket| vec![i.key(bucket)];
                let used = used_index_buckets.unwrap_or(i.count());
                Some(bucket_census(&mut conn, &keys, used, last).await?)
            }
            None => None,
        };
        let used_memory_delta = sample.used_memory.saturating_sub(empty.used_memory);
        let not_sessions = sample
            .replication()
            .saturating_sub(empty.replication())
            .min(used_memory_delta);
        let rss_delta = sample.used_memory_rss as i64 - empty.used_memory_rss as i64;
        points.push(Point {
            sessions: loaded,
            used_memory_delta,
            not_sessions,
            rss_delta,
            bytes_per_session: (used_memory_delta - not_sessions) as f64 / loaded.max(1) as f64,
            rss_per_session: rss_delta as f64 / loaded.max(1) as f64,
            sample,
            census,
            index_census,
            settled,
        });
    }
    let result = RunResult {
        label: spec.label(),
        spec,
        empty,
        points,
        load_rate: loaded as f64 / loading.as_secs_f64().max(1e-9),
    };
    progress.finish(&result);
    Ok(result)
}

fn make_batch(
    owners: &[Identity],
    width: IdWidth,
    stamp: Option<u32>,
    buckets: Option<&Buckets>,
    used_buckets: Option<u32>,
) -> Result<Vec<(SessionId, Vec<u8>)>> {
    let mut rng = rand::rng();
    owners
        .iter()
        .map(|owner| {
            let mut id = match stamp {
                Some(secs) => SessionId::generate_stamped(width, secs)?,
                None => SessionId::generate_with(width)?,
            };
            if let (Some(b), Some(used)) = (buckets, used_buckets) {
                id = b.with_bucket(&id, rng.random_range(0..used));
            }
            Ok((id, record::encode(owner, &())?))
        })
        .collect()
}

/// A benchmark's ids are fresh: any that is not stored is a fault.
fn check_inserted(results: Vec<sessionpack::session::layout::Inserted>) -> Result<()> {
    match results
        .iter()
        .find(|r| !matches!(r, sessionpack::session::layout::Inserted::Created { .. }))
    {
        Some(r) => Err(Error::Config(format!(
            "a benchmark insert was not stored: {r:?}"
        ))),
        None => Ok(()),
    }
}

async fn encodings<C>(conn: &mut C, keys: &[String]) -> Result<Vec<Option<String>>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(4096) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("OBJECT").arg("ENCODING").arg(key);
        }
        let replies: Vec<Option<String>> = pipe.query_async(conn).await?;
        out.extend(replies);
    }
    Ok(out)
}

/// Counts buckets whose HASH (or ZSET) has left listpack: all of them, or
/// a random sample scaled up when there are many and this is not the last
/// step. `keys` names a bucket's HASH and, for the bucketed layout, its
/// ZSET.
async fn bucket_census<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    keys_of: &dyn Fn(u32) -> Vec<String>,
    used: u32,
    full: bool,
) -> Result<Census> {
    let sampled = !full && used > CENSUS_SAMPLE;
    let chosen: Vec<u32> = if sampled {
        let mut rng = rand::rng();
        (0..CENSUS_SAMPLE)
            .map(|_| rng.random_range(0..used))
            .collect()
    } else {
        (0..used).collect()
    };
    let per = keys_of(0).len();
    let keys: Vec<String> = chosen.iter().flat_map(|&bucket| keys_of(bucket)).collect();
    let found = encodings(conn, &keys).await?;
    let (mut present, mut converted, mut hashes, mut zsets) = (0u64, 0u64, 0u64, 0u64);
    for pair in found.chunks(per) {
        let hash = pair[0].as_deref();
        let zset = pair.get(1).and_then(|z| z.as_deref());
        if hash.is_none() && zset.is_none() {
            continue;
        }
        present += 1;
        // A hash whose fields carry TTLs is a `listpackex`: still compact.
        let h = hash.is_some_and(|e| !e.starts_with("listpack"));
        let z = zset.is_some_and(|e| e != "listpack");
        hashes += u64::from(h);
        zsets += u64::from(z);
        converted += u64::from(h || z);
    }
    let scale = |n: u64| {
        if sampled {
            (n as f64 * f64::from(used) / chosen.len() as f64).round() as u64
        } else {
            n
        }
    };
    Ok(Census {
        buckets: scale(present),
        converted: scale(converted),
        hashes_converted: scale(hashes),
        zsets_converted: scale(zsets),
        sampled,
    })
}

async fn book_census<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    login: &str,
    recent: &str,
) -> Result<Census> {
    let found = encodings(conn, &[login.to_owned(), recent.to_owned()]).await?;
    let h = found[0].as_deref().is_some_and(|e| e != "listpack");
    let z = found[1].as_deref().is_some_and(|e| e != "listpack");
    Ok(Census {
        buckets: 1,
        converted: u64::from(h || z),
        hashes_converted: u64::from(h),
        zsets_converted: u64::from(z),
        sampled: false,
    })
}

/// The server a whole benchmark ran against, and what it was asked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryReport {
    /// The command line that produced it.
    pub command: String,
    /// Unix time the run started.
    pub started_at: u64,
    /// The server.
    pub server: ServerInfo,
    /// Sessions loaded per run.
    pub sessions: u64,
    /// Steps per run.
    pub steps: u32,
    /// The runs.
    pub runs: Vec<RunResult>,
    /// Primaries of the Redis Cluster measured (their figures summed), or
    /// `None` for one server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_primaries: Option<usize>,
}
