//! `sessionpack migrate`: copies the live sessions of a key-per-session
//! store ([`sessionpack::takeover::Source`]) into a sessionpack tower store,
//! online, with their ids, data and expiries.
//!
//! A pass `SCAN`s the source's keys a batch at a time. Each key is read
//! with its type and expiry in one step, decoded, and settled against the
//! store and the [`journal`]:
//!
//! | journal | store | outcome |
//! |---|---|---|
//! | none | none | copied (`taken` if the id is marked, `expired` if past) |
//! | none | same data and expiry | unchanged (a pass stopped before its journal write) |
//! | none | other data | skipped `taken`: never overwritten |
//! | entry | none | skipped `deleted-since-copied`: never brought back |
//! | entry, source as copied | any | unchanged |
//! | entry, source changed | as copied | updated (only while live) |
//! | entry, source changed | changed too | skipped `conflict`: the store's kept |
//!
//! Keys it cannot read are skipped and counted by reason, never touched.
//! With [`Plan::delete_copied`], a key copied, updated or unchanged is then
//! deleted, by a script that deletes it only while it holds the value and
//! expiry that were copied. After each batch the cursor and the counters
//! are written to the migration's state key (`<namespace>:migrate:<source>`),
//! so a pass that stops resumes there; a finished pass leaves the key
//! with its totals, and the next run begins a new pass.

pub mod journal;
pub mod report;

use std::sync::Arc;
use std::time::Instant;

use redis::aio::ConnectionManager;
use sessionpack::Layout;
use sessionpack::error::{Error, Result};
use sessionpack::session::id::IdWidth;
use sessionpack::takeover::{self, Source, Taken};
use sessionpack::tower::{Imported, TowerStore};

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
    let name = format!("{}|{:?}|{:?}", source.prefix, source.id, source.value);
    let digest = takeover::digest(name.as_bytes(), 0);
    format!("{namespace}:migrate:{}", hex::encode(digest))
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
    let mut report = if plan.dry_run || plan.restart {
        Report::default()
    } else {
        Report::read(&mut redis, &state).await?.unwrap_or_default()
    };
    if report.complete || report.cursor == 0 {
        report = Report::default();
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
    let delete = redis::Script::new(takeover::DELETE_IF_UNCHANGED_SCRIPT);
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
        let mut settled = tokio::task::JoinSet::new();
        for read in reads {
            let (store, conn, dry) = (store.clone(), conn.clone(), plan.dry_run);
            settled.spawn(async move {
                let outcome = settle(&store, conn, &read, dry).await;
                (read, outcome)
            });
        }
        let mut writes = redis::pipe();
        let mut deletes = Vec::new();
        while let Some(joined) = settled.join_next().await {
            let (read, outcome) =
                joined.map_err(|e| Error::Config(format!("a copy task failed: {e}")))?;
            let (outcome, entry) = outcome?;
            report.count(outcome_name(outcome));
            let scheme = store.layout().scheme();
            if let Some(entry) = entry {
                journal::write(
                    &mut writes,
                    scheme,
                    &read.taken.id,
                    entry,
                    read.taken.expires_at,
                );
            }
            let copied = matches!(
                outcome,
                Outcome::Copied | Outcome::Updated | Outcome::Unchanged
            );
            if plan.delete_copied && copied && !plan.dry_run {
                deletes.push(read);
            }
        }
        if !plan.dry_run {
            if writes.cmd_iter().next().is_some() {
                let _: () = writes.query_async(&mut redis).await?;
            }
            for read in deletes {
                let gone: i64 = delete
                    .key(&read.key)
                    .arg(&read.value)
                    .arg(read.expire_ms)
                    .invoke_async(&mut redis)
                    .await?;
                if gone == 1 {
                    report.deleted += 1;
                    let mut forget = redis::pipe();
                    journal::forget(&mut forget, store.layout().scheme(), &read.taken.id);
                    let _: () = forget.query_async(&mut redis).await?;
                } else {
                    report.kept_changed += 1;
                }
            }
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
    report.memory_after = used_memory(&mut redis).await?;
    report.seconds += started.elapsed().as_secs_f64();
    report.server_cpu_secs += crate::harness::info::server_cpu_secs(&mut redis).await? - cpu_before;
    if !plan.dry_run {
        report.write(&mut redis, &state).await?;
    }
    Ok(report)
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
    let replies: Vec<redis::Value> = match pipe.query_async(redis).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            let _: String = script.prepare_invoke().load_async(redis).await?;
            pipe.query_async(redis).await?
        }
        other => other?,
    };
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

/// Settles one session against the store and the journal (the table in
/// the module's docs); returns the outcome and the journal entry to write.
async fn settle(
    store: &TowerStore<ConnectionManager>,
    mut conn: ConnectionManager,
    read: &Read,
    dry_run: bool,
) -> Result<(Outcome, Option<journal::Entry>)> {
    let taken = &read.taken;
    let id = sessionpack::tower::tower_id(&taken.id);
    let entry = journal::Entry {
        source: takeover::digest(&read.value, read.expire_ms),
        stored: journal::stored_digest(&taken.data, taken.expires_at),
    };
    let known = journal::read(&mut conn, store.layout().scheme(), &taken.id).await?;
    let current = store.load_data(id).await?;
    let current_digest = current
        .as_ref()
        .map(|(data, at)| journal::stored_digest(data, u64::try_from(*at).unwrap_or(0)));
    let outcome = match (known, current_digest) {
        (None, None) if dry_run => Outcome::Copied,
        (None, None) => match store.import_data(id, &taken.data, taken.expires_at).await? {
            Imported::Created => Outcome::Copied,
            Imported::Taken => Outcome::Skipped("taken"),
            Imported::Expired => Outcome::Skipped("expired"),
        },
        (None, Some(stored)) if stored == entry.stored => Outcome::Unchanged,
        (None, Some(_)) => Outcome::Skipped("taken"),
        (Some(_), None) => Outcome::Skipped("deleted-since-copied"),
        (Some(known), Some(_)) if known.source == entry.source => {
            return Ok((Outcome::Unchanged, None));
        }
        (Some(known), Some(stored)) if stored == known.stored => {
            if dry_run || store.replace_data(id, &taken.data, expiry(taken)).await? {
                Outcome::Updated
            } else {
                Outcome::Skipped("deleted-since-copied")
            }
        }
        (Some(_), Some(_)) => Outcome::Skipped("conflict"),
    };
    let write = matches!(
        outcome,
        Outcome::Copied | Outcome::Updated | Outcome::Unchanged
    );
    Ok((outcome, (write && !dry_run).then_some(entry)))
}

fn expiry(taken: &Taken) -> i64 {
    i64::try_from(taken.expires_at).unwrap_or(i64::MAX)
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
