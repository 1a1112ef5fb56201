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

pub mod report;

use std::sync::Arc;
use std::time::Instant;

use redis::aio::ConnectionManager;
use sessionpack::Layout;
use sessionpack::error::{Error, Result};
use sessionpack::session::id::IdWidth;
use sessionpack::takeover::{self, Source, Taken};
use sessionpack::tower::{self as tower_store, Synced, TowerStore};

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

/// Runs one pass (or the rest of one) of `plan` into `store`; `progress`
/// is told the keys scanned after each batch.
pub async fn run(
    conn: ConnectionManager,
    store: TowerStore<ConnectionManager>,
    plan: &Plan,
    mut progress: impl FnMut(u64),
) -> Result<Report> {
    if store.layout().id_width() != IdWidth::Bits128 {
        return Err(Error::Config(
            "a migration fills a tower store (128-bit ids)".into(),
        ));
    }
    let namespace = store.layout().buckets().namespace().to_owned();
    let state = state_key(&namespace, &plan.source);
    let mut redis = conn.clone();
    let takeover: Option<String> = redis::cmd("GET")
        .arg(tower_store::state_key(&namespace))
        .query_async(&mut redis)
        .await?;
    if takeover.as_deref() == Some(tower_store::CLOSED) {
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
    let mut report = stored.filter(|r| !r.complete).unwrap_or_default();
    // Keys closed this pass, counted by the close script itself, so a
    // close killed part way (even in its first batch) still counts every
    // key it deleted.
    let deleted_key = format!("{state}:deleted");
    if new_pass && !plan.dry_run {
        let _: () = redis::cmd("DEL")
            .arg(&deleted_key)
            .query_async(&mut redis)
            .await?;
        report.write(&mut redis, &state).await?;
    }
    let started = Instant::now();
    let cpu_before = crate::harness::info::server_cpu_secs(&mut redis).await?;
    let memory = used_memory(&mut redis).await?;
    if report.batches == 0 {
        report.memory_before = memory;
    }
    report.memory_peak = report.memory_peak.max(memory);
    report.dry_run = plan.dry_run;

    let read = redis::Script::new(takeover::READ_SCRIPT);
    let close = redis::Script::new(tower_store::CLOSE_SCRIPT);
    let own_keys = format!("{namespace}:");
    let store = Arc::new(store);
    let mut batches = 0u64;
    loop {
        let (cursor, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(report.cursor)
            .arg("MATCH")
            .arg(plan.source.pattern())
            .arg("COUNT")
            .arg(plan.batch)
            .query_async(&mut redis)
            .await?;
        let keys: Vec<Vec<u8>> = keys
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
            let () = redis::cmd("DEL")
                .arg(revoked)
                .query_async(&mut redis)
                .await?;
        }
        if !closing.is_empty() {
            let mut pipe = redis::pipe();
            for read in &closing {
                pipe.cmd("EVALSHA")
                    .arg(close.get_hash())
                    .arg(3)
                    .arg(&read.key)
                    .arg(tower_store::marks_key(store.layout(), &read.taken.id))
                    .arg(&deleted_key)
                    .arg(&read.value)
                    .arg(read.expire_ms)
                    .arg(read.taken.id.as_bytes())
                    .arg(read.taken.expires_at);
            }
            // Pipelined: one round trip for the batch. A key changed since
            // its read is kept and counted; the next run closes it.
            let closed: Vec<i64> = scripted(&mut redis, &close, &pipe).await?;
            report.kept_changed += closed.iter().filter(|&&c| c != 1).count() as u64;
        }
        if plan.delete_copied && !plan.dry_run {
            let deleted: Option<u64> = redis::cmd("GET")
                .arg(&deleted_key)
                .query_async(&mut redis)
                .await?;
            report.deleted = deleted.unwrap_or(0);
        }
        report.cursor = cursor;
        report.batches += 1;
        report.memory_peak = report.memory_peak.max(used_memory(&mut redis).await?);
        report.complete = cursor == 0;
        if !plan.dry_run {
            report.write(&mut redis, &state).await?;
        }
        progress(report.scanned);
        batches += 1;
        if cursor == 0 || plan.stop_after_batches.is_some_and(|n| batches >= n) {
            break;
        }
    }
    if plan.delete_copied && report.complete && report.kept_changed == 0 && !plan.dry_run {
        close_takeover(&mut redis, &namespace).await?;
        report.closed = true;
    }
    report.memory_after = used_memory(&mut redis).await?;
    report.seconds += started.elapsed().as_secs_f64();
    report.server_cpu_secs += crate::harness::info::server_cpu_secs(&mut redis).await? - cpu_before;
    if !plan.dry_run {
        report.write(&mut redis, &state).await?;
        if report.complete {
            // Its count is in the report now; a pass killed before this
            // has it deleted when the next pass begins.
            let _: () = redis::cmd("DEL")
                .arg(&deleted_key)
                .query_async(&mut redis)
                .await?;
        }
    }
    Ok(report)
}

/// Records the takeover of `namespace` closed (stores with
/// [`TowerStore::with_takeover`] then read only their buckets), and drops
/// the sessions' marks and the owners revoked during it, which nothing
/// reads any more.
async fn close_takeover(redis: &mut ConnectionManager, namespace: &str) -> Result<()> {
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(tower_store::state_key(namespace))
        .arg(tower_store::CLOSED)
        .ignore()
        .cmd("DEL")
        .arg(tower_store::revoked_key(namespace))
        .ignore()
        .query_async(redis)
        .await?;
    let pattern = format!("{}:*:m", sessionpack::acl::escape_glob(namespace));
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("TYPE")
            .arg("hash")
            .arg("COUNT")
            .arg(1000)
            .query_async(redis)
            .await?;
        if !keys.is_empty() {
            let _: () = redis::cmd("UNLINK").arg(keys).query_async(redis).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// Reads a batch of keys (type, value, expiry), and decodes them; keys
/// that do not decode are counted in `report` and dropped.
async fn read_keys(
    redis: &mut ConnectionManager,
    script: &redis::Script,
    source: &Source,
    keys: Vec<Vec<u8>>,
    report: &mut Report,
) -> Result<Vec<Read>> {
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
async fn scripted<T: redis::FromRedisValue>(
    redis: &mut ConnectionManager,
    script: &redis::Script,
    pipe: &redis::Pipeline,
) -> Result<T> {
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
async fn settle(
    store: &TowerStore<ConnectionManager>,
    taken: &Taken,
    dry_run: bool,
) -> Result<Outcome> {
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

/// The server's `used_memory`.
async fn used_memory(redis: &mut ConnectionManager) -> Result<u64> {
    let info = crate::harness::info::info(redis, "memory").await?;
    Ok(info
        .get("used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}
