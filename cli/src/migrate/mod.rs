//! `sessionpack migrate`: copies the live sessions of a key-per-session
//! store ([`sessionpack::takeover::Source`]) into a sessionpack tower store,
//! online, with their ids, data and expiries.
//!
//! A pass `SCAN`s the source's keys a batch at a time. Each key is read
//! with its type and expiry in one step, decoded, and copied with
//! [`TowerStore::take_over`]: while old keys exist they hold each
//! session's newest state (the old app writes only them, and a store with
//! [`TowerStore::with_takeover`] writes them first), so the store is made
//! to hold what the key holds: `copied` (new to the store), `updated` (the
//! store's copy replaced, only while it is still the copy read),
//! `unchanged`, or skipped as `expired` or `taken` (a revocation's mark
//! stands beside the id). Keys it cannot read are skipped and counted by
//! reason (see [`sessionpack::takeover::Skip`]), never touched.
//!
//! With [`Plan::delete_copied`] the pass closes the takeover: it reads
//! the store's copies of a batch's keys in one pipeline
//! ([`TowerStore::holds_each`]), copies only those that differ, then
//! deletes each key by a script that deletes it only while it holds the
//! value and expiry read and marks the session moved, in one step (the
//! batch's scripts in one pipeline); a pass that went round with every key
//! so closed records the takeover closed and drops the marks. A key whose
//! session's owner was revoked during the takeover is not copied
//! (`revoked`) and is deleted. After each batch the cursor and
//! the counters are written to the migration's state key
//! (`<namespace>:migrate:<source>`), so a pass that stops resumes there; a
//! finished pass leaves the key with its totals, and the next run begins a
//! new pass.
//!
//! On a Redis Cluster ([`run_on`] with [`Keyspace::cluster`]) the pass
//! scans each primary in turn and begins again when the slots move under
//! it ([`keyspace`]), and the close takes three steps where one server
//! takes one (`close`). A batch that fails with a transient error (a
//! failover, Redis restarting or loading) is tried again for up to a
//! minute.

mod close;
pub mod keyspace;
pub mod report;

use std::sync::Arc;
use std::time::Instant;

use redis::aio::ConnectionManager;
use sessionpack::error::{Error, Result};
use sessionpack::map_store::{self, Synced};
use sessionpack::session::id::IdWidth;
use sessionpack::session::layout::Layout;
use sessionpack::takeover::{self, Source, Taken};
use sessionpack::tower::TowerStore;

pub use keyspace::Keyspace;
pub use report::Report;

/// What a migration does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Where the sessions are.
    pub source: Source,
    /// Read and decide, write nothing (no sessions, journal, cursor or
    /// deletes).
    pub dry_run: bool,
    /// Delete each source key once its session is in the store.
    pub delete_copied: bool,
    /// Keys asked of each `SCAN`.
    pub batch: usize,
    /// Begin a new pass even where one stopped part way.
    pub restart: bool,
    /// Stop after this many batches, leaving the cursor (for tests of
    /// resuming).
    pub stop_after_batches: Option<u64>,
}

/// How long a pass tries a batch again while the server fails to answer
/// (restarting, loading, failing over) before it stops with the error; its
/// state is saved, and a run after resumes.
const FAILING_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// The pause before a batch is tried again.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// The outcome of a key whose session's owner was revoked during the
/// takeover.
const REVOKED: &str = "revoked";

/// What became of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Copied,
    Updated,
    Unchanged,
    Skipped(&'static str),
}

/// A key read and decoded, with what is needed to delete it later.
struct Read {
    key: Vec<u8>,
    value: Vec<u8>,
    expire_ms: i64,
    taken: Taken,
}

/// The state key of a migration from `source` into `namespace`.
pub fn state_key(namespace: &str, source: &Source) -> String {
    let form = match source.value {
        takeover::ValueForm::TowerRecord => "tower",
        takeover::ValueForm::JsonMap => "json",
        takeover::ValueForm::MsgpackMap => "msgpack",
        takeover::ValueForm::ActixState => "actix",
    };
    let id = match source.id {
        takeover::IdForm::Base64Url => "b64",
        takeover::IdForm::Hex => "hex",
        takeover::IdForm::ActixSessionKey => "actix",
    };
    format!(
        "{namespace}:migrate:{form}:{id}:{}",
        hex::encode(&source.prefix)
    )
}

/// Runs one pass (or the rest of one) of `plan` into `store`, on one
/// server; `progress` is told the keys scanned after each batch.
pub async fn run(
    conn: ConnectionManager,
    store: TowerStore<ConnectionManager>,
    plan: &Plan,
    progress: impl FnMut(u64),
) -> Result<Report> {
    run_on(Keyspace::Server(conn.clone()), conn, store, plan, progress).await
}

/// [`run`] on the server or cluster whose keys `keyspace` scans, through
/// `conn` (a [`sessionpack::conn::cluster::Cluster`] for a cluster), into
/// `store` on the same.
pub async fn run_on<C>(
    mut keyspace: Keyspace,
    conn: C,
    store: TowerStore<C>,
    plan: &Plan,
    mut progress: impl FnMut(u64),
) -> Result<Report>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    if store.layout().id_width() != IdWidth::Bits128 {
        return Err(Error::Config(
            "a migration fills a tower store (128-bit ids)".into(),
        ));
    }
    let namespace = store.layout().buckets().namespace().to_owned();
    let state = state_key(&namespace, &plan.source);
    let mut redis = conn.clone();
    let takeover: Option<String> = redis::cmd("GET")
        .arg(map_store::state_key(&namespace))
        .query_async(&mut redis)
        .await?;
    if takeover.as_deref() == Some(map_store::CLOSED) {
        return Err(Error::Config(format!(
            "the takeover of namespace {namespace:?} was closed: its sessions live in the store \
             alone now, and a copy from old keys could bring back what it deleted"
        )));
    }
    let stored = if plan.dry_run || plan.restart {
        None
    } else {
        Report::read(&mut redis, &state).await?
    };
    // A pass in progress is resumed; none, or a finished one, begins a new
    // pass, recorded at once as begun.
    let new_pass = stored.as_ref().is_none_or(|r| r.complete);
    // A closing pass that went round with every key closed but was stopped
    // before it closed the takeover (killed, or the close failed): the
    // pass that closes it counts on from its counters, so its report holds
    // every key the close deleted.
    let unclosed = plan.delete_copied
        && stored
            .as_ref()
            .is_some_and(|r| r.complete && !r.closed && r.kept_changed == 0 && r.deleted > 0);
    let mut report = stored.filter(|r| !r.complete).unwrap_or_default();
    // Keys closed this pass, counted by the close scripts themselves, so a
    // close killed part way (even in its first batch) still counts every
    // key it deleted.
    let counters = close::Counters::new(&state, matches!(keyspace, Keyspace::Cluster(_)));
    if new_pass && !plan.dry_run {
        if !unclosed {
            counters.clear(&mut keyspace).await?;
        }
        report.write(&mut redis, &state).await?;
    }
    let mut deleted_before = if plan.dry_run && new_pass {
        0
    } else {
        counters.sum(&mut keyspace).await?
    };
    let started = Instant::now();
    let cpu_before = keyspace.cpu_secs().await?;
    let memory = keyspace.used_memory().await?;
    if report.batches == 0 {
        report.memory_before = memory;
    }
    report.memory_peak = report.memory_peak.max(memory);
    report.dry_run = plan.dry_run;

    let read = redis::Script::new(takeover::READ_SCRIPT);
    let closer = close::Closer::new(&keyspace);
    let own_keys = format!("{namespace}:");
    let pattern = plan.source.pattern();
    let store = Arc::new(store);
    let mut batches = 0u64;
    let mut closed_now = 0u64;
    let mut failing_since: Option<Instant> = None;
    loop {
        let saved = report.clone();
        let batch = async {
            let scanned = keyspace.scan(&mut report, &pattern, plan.batch).await?;
            let keys: Vec<Vec<u8>> = scanned
                .keys
                .into_iter()
                .filter(|k| !k.starts_with(own_keys.as_bytes()))
                .collect();
            report.scanned += keys.len() as u64;
            let reads = read_keys(&mut redis, &read, &plan.source, keys, &mut report).await?;
            let closing_pass = plan.delete_copied && !plan.dry_run;
            // The close copies only what the store does not hold as read: most
            // keys were copied before, and one pipelined read tells them apart.
            let held = if closing_pass {
                let taken: Vec<&Taken> = reads.iter().map(|r| &r.taken).collect();
                store.holds_each(&taken).await?
            } else {
                vec![false; reads.len()]
            };
            let mut closing = Vec::new();
            // Keys of sessions whose owner was revoked during the takeover: the
            // copy refused them, and they go, as the store's own copy went.
            let mut revoked = Vec::new();
            let mut settled = tokio::task::JoinSet::new();
            for (read, held) in reads.into_iter().zip(held) {
                if held {
                    report.count(outcome_name(Outcome::Unchanged));
                    closing.push(read);
                    continue;
                }
                let (store, dry) = (store.clone(), plan.dry_run);
                settled.spawn(async move {
                    let outcome = settle(&store, &read.taken, dry).await;
                    (read, outcome)
                });
            }
            while let Some(joined) = settled.join_next().await {
                let (read, outcome) =
                    joined.map_err(|e| Error::Config(format!("a copy task failed: {e}")))?;
                let outcome = outcome?;
                report.count(outcome_name(outcome));
                let in_store = matches!(
                    outcome,
                    Outcome::Copied | Outcome::Updated | Outcome::Unchanged
                );
                if closing_pass && in_store {
                    closing.push(read);
                } else if outcome == Outcome::Skipped(REVOKED) {
                    revoked.push(read.key);
                }
            }
            if !revoked.is_empty() {
                // One key a command: on a cluster they lie in many slots.
                let mut pipe = redis::pipe();
                for key in &revoked {
                    pipe.cmd("DEL").arg(key).ignore();
                }
                let () = pipe.query_async(&mut redis).await?;
            }
            if !closing.is_empty() {
                let (closed, kept) = closer
                    .close(&mut redis, store.layout(), &counters, &closing)
                    .await?;
                closed_now += closed;
                report.kept_changed += kept;
            }
            if closing_pass {
                report.deleted = deleted_before + closed_now;
            }
            report.batches += 1;
            report.memory_peak = report.memory_peak.max(keyspace.used_memory().await?);
            report.complete = scanned.round;
            if !plan.dry_run {
                report.write(&mut redis, &state).await?;
            }
            Ok::<bool, Error>(scanned.round)
        };
        let round = match batch.await {
            Ok(round) => {
                failing_since = None;
                round
            }
            // Redis restarting or loading, a failover: the batch again, from
            // where the last one left the report, once the server answers.
            // Copies and closes are safe to repeat.
            Err(e)
                if e.is_transient()
                    && failing_since.get_or_insert_with(Instant::now).elapsed() < FAILING_FOR =>
            {
                tracing::warn!("a batch failed ({e}); trying it again");
                report = saved;
                tokio::time::sleep(PAUSE).await;
                closed_now = 0;
                deleted_before = if plan.delete_copied && !plan.dry_run {
                    counters.sum(&mut keyspace).await?
                } else {
                    0
                };
                continue;
            }
            Err(e) => return Err(e),
        };
        progress(report.scanned);
        batches += 1;
        if round || plan.stop_after_batches.is_some_and(|n| batches >= n) {
            break;
        }
    }
    if plan.delete_copied && report.complete && report.kept_changed == 0 && !plan.dry_run {
        close::close_takeover(&mut redis, &mut keyspace, &namespace).await?;
        report.closed = true;
    }
    report.memory_after = keyspace.used_memory().await?;
    report.seconds += started.elapsed().as_secs_f64();
    let cpu_after = keyspace.cpu_secs().await?;
    // The primaries that served throughout (a failover's new primary
    // counts from when it was met).
    report.server_cpu_secs += cpu_after
        .iter()
        .filter_map(|(node, after)| Some(after - cpu_before.get(node)?))
        .sum::<f64>();
    if !plan.dry_run {
        report.write(&mut redis, &state).await?;
        if report.complete {
            // Its count is in the report now; a pass killed before this
            // has them deleted when the next pass begins.
            counters.clear(&mut keyspace).await?;
        }
    }
    Ok(report)
}

/// Reads a batch of keys (type, value, expiry), and decodes them; keys
/// that do not decode are counted in `report` and dropped.
async fn read_keys<C>(
    redis: &mut C,
    script: &redis::Script,
    source: &Source,
    keys: Vec<Vec<u8>>,
    report: &mut Report,
) -> Result<Vec<Read>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let mut ids = Vec::with_capacity(keys.len());
    let mut pipe = redis::pipe();
    for key in keys {
        match source.id_of(&key, IdWidth::Bits128) {
            Ok(_) => {
                pipe.cmd("EVALSHA").arg(script.get_hash()).arg(1).arg(&key);
                ids.push(key);
            }
            Err(skip) => report.count(skip.reason()),
        }
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let replies: Vec<redis::Value> = scripted(redis, script, &pipe).await?;
    let mut reads = Vec::with_capacity(ids.len());
    for (key, reply) in ids.into_iter().zip(replies) {
        let (kind, value, expire_ms) = parse_read(reply);
        match source.decode(&key, IdWidth::Bits128, &kind, value.as_deref(), expire_ms) {
            Ok(taken) => reads.push(Read {
                key,
                value: value.unwrap_or_default(),
                expire_ms,
                taken,
            }),
            Err(skip) => report.count(skip.reason()),
        }
    }
    Ok(reads)
}

/// Runs a pipeline of `script`'s `EVALSHA`s, loading the script and running
/// the pipeline again where the server had not cached it. Both scripts
/// run so are safe to run twice: a read reads again, and a close of a key
/// closed by the first run finds it gone and counts it kept (changed),
/// which only leaves the takeover for the next run to close.
async fn scripted<C, T>(redis: &mut C, script: &redis::Script, pipe: &redis::Pipeline) -> Result<T>
where
    C: redis::aio::ConnectionLike + Send,
    T: redis::FromRedisValue,
{
    match pipe.query_async(redis).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            let _: String = script.prepare_invoke().load_async(redis).await?;
            Ok(pipe.query_async(redis).await?)
        }
        other => Ok(other?),
    }
}

/// The read script's reply: type, value, expiry in ms.
fn parse_read(reply: redis::Value) -> (String, Option<Vec<u8>>, i64) {
    let parts: Vec<redis::Value> = redis::from_redis_value(reply).unwrap_or_default();
    let mut parts = parts.into_iter();
    let kind: String = parts
        .next()
        .and_then(|v| redis::from_redis_value(v).ok())
        .unwrap_or_else(|| "none".into());
    let value: Option<Vec<u8>> = parts.next().and_then(|v| redis::from_redis_value(v).ok());
    let expire_ms: i64 = parts
        .next()
        .and_then(|v| redis::from_redis_value(v).ok())
        .unwrap_or(-2);
    (kind, value, expire_ms)
}

/// Copies one session ([`TowerStore::take_over`]); a dry run only reads
/// what the store holds and tells what a copy would do.
async fn settle<C>(store: &TowerStore<C>, taken: &Taken, dry_run: bool) -> Result<Outcome>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    if dry_run {
        let id = sessionpack::tower::tower_id(&taken.id);
        return Ok(match store.load_data(id).await? {
            None => Outcome::Copied,
            Some((data, at))
                if data == taken.data && u64::try_from(at).ok() == Some(taken.expires_at) =>
            {
                Outcome::Unchanged
            }
            Some(_) => Outcome::Updated,
        });
    }
    Ok(match store.take_over(taken).await? {
        Synced::Created => Outcome::Copied,
        Synced::Updated => Outcome::Updated,
        Synced::Unchanged => Outcome::Unchanged,
        Synced::Expired => Outcome::Skipped("expired"),
        Synced::Taken => Outcome::Skipped("taken"),
        Synced::Revoked => Outcome::Skipped(REVOKED),
    })
}

fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Copied => "copied",
        Outcome::Updated => "updated",
        Outcome::Unchanged => "unchanged",
        Outcome::Skipped(reason) => reason,
    }
}
