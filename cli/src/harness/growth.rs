//! The growth benchmark: a compact store that splits and merges its
//! buckets ([`sessionpack::CompactConfig::growing`]) loaded from a few
//! thousand sessions to a hundred million and back down, beside stores of
//! fixed bucket counts loaded to the same sizes, with `used_memory` per
//! session, converted buckets and server CPU per insert at each size.
//!
//! Sizes above a million are emulated, as `bench memory` does: the ids
//! are confined to `1 / factor` of the id space (their top bits zero), so
//! the buckets that hold them hold what they would at the full size, and
//! bytes per session are the real ones. The shrink point deletes all but
//! its share of the largest size's sessions and lets the sweeper merge.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::info::{MemorySample, server_cpu_secs, wait_for_rehash};
use sessionpack::error::{Error, Result};
use sessionpack::session::layout::{Compact, CompactConfig, Layout};
use sessionpack::session::record;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Connection, SessionId};

/// Sessions handed to one batch insert.
const BATCH: usize = 8192;
/// Deletes in flight while shrinking.
const DELETES_IN_FLIGHT: usize = 64;
/// Sessions a store of the same kind inserts before the empty sample.
const WARM_UP: usize = 20_000;

/// A store measured: one that grows, or one of `2^bits` fixed buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Store {
    /// Buckets that split and merge, from the default 16.
    Growing,
    /// `2^bits` buckets.
    Fixed(u8),
}

impl Store {
    /// `growing` or `fixed 2^13`.
    pub fn label(self) -> String {
        match self {
            Self::Growing => "growing".into(),
            Self::Fixed(bits) => format!("fixed 2^{bits}"),
        }
    }

    fn config(self) -> CompactConfig {
        match self {
            Self::Growing => CompactConfig::growing(),
            Self::Fixed(bits) => CompactConfig::new(bits),
        }
    }
}

/// A size to measure at: the sessions it stands for, and those loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    /// Sessions the point stands for.
    pub sessions: u64,
    /// Sessions loaded (fewer where emulated).
    pub real: u64,
}

/// One measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GrowthPoint {
    /// The size.
    pub size: Size,
    /// Whether the store had grown larger and shrunk back to this size.
    pub shrunk: bool,
    /// `used_memory` less client buffers (`mem_clients_normal`), above the
    /// empty store's, per loaded session.
    pub bytes_per_session: f64,
    /// Bucket keys holding sessions.
    pub buckets: u64,
    /// Of those, how many have left listpack.
    pub converted: u64,
    /// Redis CPU per session inserted since the previous point, µs.
    pub cpu_us_per_insert: f64,
    /// Splits and merges so far (a growing store's shape epochs summed).
    pub reshapes: u64,
    /// The raw figures.
    pub sample: MemorySample,
}

/// All points of one store over one run of sizes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GrowthRun {
    /// The store.
    pub store: Store,
    /// `factor` where the sizes are emulated, else 1.
    pub factor: u64,
    /// The points, in order.
    pub points: Vec<GrowthPoint>,
}

/// What is loaded: identity-only records, or with `data_bytes` of data
/// each (a string), as an app's session carries.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Sessions {
    /// Bytes of data beside the identity.
    pub data_bytes: usize,
}

impl Sessions {
    fn record(&self, identity: u64) -> Result<Vec<u8>> {
        if self.data_bytes == 0 {
            return record::encode(&identity, &());
        }
        record::encode(&identity, &"s".repeat(self.data_bytes))
    }

    /// Listpack entries one session takes at the default limits: its value
    /// and its pieces.
    pub fn entries(&self) -> Result<u64> {
        let len = self.record(sessionpack::identity::FIRST_INT)?.len();
        Ok(if len + 4 <= 64 {
            1
        } else {
            1 + (len - 58).div_ceil(64) as u64
        })
    }
}

/// Loads `store` through `sizes` (ascending) with ids confined to
/// `1 / factor` of the id space, measuring at each; then, with `shrink`,
/// deletes down to that size, runs the sweeper until it merges no more,
/// and measures once more. `conn` must reach an emptied server.
pub async fn run(
    conn: Connection,
    store: Store,
    sessions: Sessions,
    sizes: &[Size],
    factor: u64,
    shrink: Option<Size>,
) -> Result<GrowthRun> {
    let mut c = conn.clone();
    warm_up(&conn, store, sessions).await?;
    let layout = Compact::new(conn, store.config()).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let empty = sample(&mut c).await?;
    let mut ids: Vec<SessionId> = Vec::new();
    let mut points = Vec::new();
    let prefix = factor.trailing_zeros();
    let mut identity = sessionpack::identity::FIRST_INT;
    for &size in sizes {
        let cpu = server_cpu_secs(&mut c).await?;
        let before = ids.len() as u64;
        while (ids.len() as u64) < size.real {
            let n = (size.real - ids.len() as u64).min(2 * BATCH as u64) as usize;
            let mut batch = Vec::with_capacity(n);
            for _ in 0..n {
                let id = confined(SessionId::generate()?, prefix)?;
                batch.push((id, sessions.record(identity)?));
                identity += 1;
            }
            let (a, b) = batch.split_at(batch.len() / 2);
            let (ra, rb) =
                tokio::join!(layout.insert_many(a, 86_400), layout.insert_many(b, 86_400));
            for inserted in ra?.into_iter().chain(rb?) {
                if !matches!(
                    inserted,
                    sessionpack::session::layout::Inserted::Created { .. }
                ) {
                    return Err(Error::Config(format!(
                        "a benchmark insert was not stored: {inserted:?}"
                    )));
                }
            }
            ids.extend(batch.into_iter().map(|(id, _)| id));
        }
        let spent = server_cpu_secs(&mut c).await? - cpu;
        let inserted = (ids.len() as u64 - before).max(1);
        let mut point = measure(&mut c, &layout, &empty, size, false).await?;
        point.cpu_us_per_insert = spent * 1e6 / inserted as f64;
        points.push(point);
    }
    if let Some(size) = shrink {
        let keep = (size.real as usize).min(ids.len());
        let gone: Vec<SessionId> = ids.split_off(keep);
        // Deleted as an app logs out a session it has loaded: knowing the
        // record's length, so its pieces go with it (every record here
        // has the same length).
        let len = sessions.record(sessionpack::identity::FIRST_INT)?.len();
        for chunk in gone.chunks(DELETES_IN_FLIGHT) {
            let mut tasks = tokio::task::JoinSet::new();
            for id in chunk {
                let (layout, id) = (layout.clone(), *id);
                tasks.spawn(async move { layout.delete(&id, Some(len)).await });
            }
            while let Some(done) = tasks.join_next().await {
                done.map_err(|e| Error::Config(format!("a delete task failed: {e}")))??;
            }
        }
        if layout.shape().is_some() {
            let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
            let units = sweeper.units();
            // Each pass folds a level where two siblings fit in one.
            for _ in 0..64 {
                let pass = sweeper.sweep_range(0..units).await?;
                if pass.merges == 0 {
                    break;
                }
            }
        }
        points.push(measure(&mut c, &layout, &empty, size, true).await?);
    }
    Ok(GrowthRun {
        store,
        factor,
        points,
    })
}

/// Runs a store of the same kind through [`WARM_UP`] inserts in another
/// namespace, then empties the server. Redis keeps some buffers at the
/// largest size a command has needed (the Lua client's arguments, for one:
/// a split writes a bucket with one `HSET` of up to 2,000 arguments), so a
/// server that has run a store for a while holds them whatever its keys;
/// warmed up, the empty sample includes them, and bytes per session count
/// what grows with the sessions (on Redis 7.0, 74 KB at 10k sessions of a
/// growing store, 7 B a session there).
async fn warm_up(conn: &Connection, store: Store, sessions: Sessions) -> Result<()> {
    let layout = Compact::new(
        conn.clone(),
        store.config().with_namespace("growth-warm-up"),
    )
    .await?;
    let mut batch = Vec::with_capacity(WARM_UP);
    for n in 0..WARM_UP as u64 {
        batch.push((SessionId::generate()?, sessions.record(n + 1)?));
    }
    layout.insert_many(&batch, 60).await?;
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut conn.clone())
        .await?;
    Ok(())
}

/// A memory sample once the key dicts have finished rehashing, taken
/// right after `CONFIG RESETSTAT`. Redis 7 keeps a latency histogram for
/// each command it has run (`latency-tracking`), tens of KB each, made at
/// a command's first call and kept until a reset, whatever the keys: a
/// growing store's scripts call more commands than a fixed store's, which
/// left 250 KB more after `FLUSHALL` in a 10k-session run, as much as the
/// sessions' own 350 KB. Reset before every sample, the empty one too,
/// they are in none, and bytes per session count what the sessions hold.
/// A server that refuses `CONFIG` is sampled as it is.
async fn sample(conn: &mut Connection) -> Result<MemorySample> {
    wait_for_rehash(conn, Duration::from_secs(120)).await?;
    settle_key_table(conn).await?;
    wait_for_rehash(conn, Duration::from_secs(120)).await?;
    let _: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await;
    MemorySample::read(conn).await
}

/// Waits, up to ten seconds, until the key table's size (`MEMORY STATS`
/// `overhead.hashtable.main`) has held for three reads 100 ms apart. A
/// store that shrank from many keys to few leaves a table sized for the
/// many (half a megabyte for 33k keys) until the server's cron shrinks it,
/// which a sample taken at once would count as the sessions'.
async fn settle_key_table(conn: &mut Connection) -> Result<()> {
    let mut last = None;
    let mut same = 0;
    for _ in 0..100 {
        // A server that refuses MEMORY STATS is sampled as it is.
        let Ok(stats) = redis::cmd("MEMORY")
            .arg("STATS")
            .query_async::<Vec<redis::Value>>(conn)
            .await
        else {
            return Ok(());
        };
        let table = stats
            .chunks(2)
            .find_map(|pair| match pair {
                [name, value]
                    if redis::from_redis_value_ref::<String>(name).ok().as_deref()
                        == Some("db.0") =>
                {
                    Some(value.clone())
                }
                _ => None,
            })
            .and_then(|db| redis::from_redis_value::<Vec<redis::Value>>(db).ok())
            .and_then(|db| {
                db.chunks(2).find_map(|pair| match pair {
                    [name, value]
                        if redis::from_redis_value_ref::<String>(name).ok().as_deref()
                            == Some("overhead.hashtable.main") =>
                    {
                        redis::from_redis_value_ref::<u64>(value).ok()
                    }
                    _ => None,
                })
            });
        same = if table == last { same + 1 } else { 0 };
        if same >= 3 {
            break;
        }
        last = table;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// `id` with its top `bits` bits cleared.
fn confined(id: SessionId, bits: u32) -> Result<SessionId> {
    let mut bytes = id.as_bytes().to_vec();
    for (i, byte) in bytes.iter_mut().enumerate().take(bits.div_ceil(8) as usize) {
        let cleared = (bits - 8 * i as u32).min(8);
        *byte &= 0xffu8.checked_shr(cleared).unwrap_or(0);
    }
    SessionId::from_slice(&bytes).ok_or_else(|| Error::Config("an id of no known width".into()))
}

async fn measure(
    conn: &mut Connection,
    layout: &Compact<Connection>,
    empty: &MemorySample,
    size: Size,
    shrunk: bool,
) -> Result<GrowthPoint> {
    let sample = sample(conn).await?;
    let keys: Vec<String> = match layout.shape() {
        Some(shape) => {
            let mut keys = Vec::new();
            for group in 0..shape.group_count() {
                for node in layout.group_buckets(group).await? {
                    keys.push(shape.bucket_key(node));
                }
            }
            keys
        }
        None => (0..layout.buckets().count())
            .map(|b| layout.scheme().bucket_key(b))
            .collect(),
    };
    let (buckets, converted) = census(conn, &keys).await?;
    let reshapes = match layout.shape() {
        Some(shape) => {
            let groups: Vec<u32> = (0..shape.group_count()).collect();
            layout
                .fetch_shapes(&groups)
                .await?
                .iter()
                .map(|s| s.epoch())
                .sum()
        }
        None => 0,
    };
    // Client buffers are the connections', not the sessions': a burst of
    // deletes leaves a query buffer Redis shrinks only later.
    let held = |s: &MemorySample| s.used_memory.saturating_sub(s.mem_clients_normal);
    let delta = held(&sample).saturating_sub(held(empty));
    Ok(GrowthPoint {
        size,
        shrunk,
        bytes_per_session: delta as f64 / size.real.max(1) as f64,
        buckets,
        converted,
        cpu_us_per_insert: 0.0,
        reshapes,
        sample,
    })
}

/// Bucket keys that exist among `keys`, and how many left listpack.
async fn census(conn: &mut Connection, keys: &[String]) -> Result<(u64, u64)> {
    let (mut present, mut converted) = (0, 0);
    for chunk in keys.chunks(4096) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("OBJECT").arg("ENCODING").arg(key);
        }
        let found: Vec<Option<String>> = pipe.query_async(conn).await?;
        for encoding in found.into_iter().flatten() {
            present += 1;
            converted += u64::from(!encoding.starts_with("listpack"));
        }
    }
    Ok((present, converted))
}

/// The fixed bucket counts that may be the best at `sessions` sessions of
/// `entries` listpack entries each: the fewest buckets whose mean fill is
/// within the entry limit (some may convert), and twice as many (none
/// will). Fewer converts for sure; more costs more bucket keys.
pub fn fixed_candidates(sessions: u64, entries: u64, limit: u64) -> Vec<u8> {
    let buckets = (sessions * entries).div_ceil(limit).max(1);
    let least = (64 - (buckets - 1).leading_zeros()) as u8;
    [least, least + 1]
        .into_iter()
        .filter(|b| (1..=24).contains(b))
        .collect()
}

/// At each size, the fixed store of least bytes per session among those
/// with no converted bucket, from `runs`: (size, bits, bytes/session).
pub fn best_fixed(runs: &[GrowthRun]) -> BTreeMap<u64, (u8, f64)> {
    let mut best: BTreeMap<u64, (u8, f64)> = BTreeMap::new();
    for run in runs {
        let Store::Fixed(bits) = run.store else {
            continue;
        };
        for p in run.points.iter().filter(|p| !p.shrunk && p.converted == 0) {
            let entry = best.entry(p.size.sessions).or_insert((bits, f64::MAX));
            if p.bytes_per_session < entry.1 {
                *entry = (bits, p.bytes_per_session);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_bracket_the_fewest_buckets_that_hold_the_mean() {
        // 1M one-entry sessions over 512-entry buckets: 1954 buckets, 2^11.
        assert_eq!(fixed_candidates(1_000_000, 1, 512), vec![11, 12]);
        assert_eq!(fixed_candidates(10_000, 1, 512), vec![5, 6]);
        assert_eq!(fixed_candidates(100, 1, 512), vec![1]);
    }

    #[test]
    fn confined_ids_have_their_top_bits_cleared() {
        let id = SessionId::parse("ffffc0ffee00112233445566778899aabbccddee").unwrap();
        let c = confined(id, 7).unwrap();
        assert_eq!(c.as_bytes()[0], 0x01);
        assert_eq!(&c.as_bytes()[1..], &id.as_bytes()[1..]);
        let c = confined(id, 12).unwrap();
        assert_eq!(&c.as_bytes()[..2], &[0x00, 0x0f]);
        assert_eq!(confined(id, 0).unwrap(), id);
    }
}
